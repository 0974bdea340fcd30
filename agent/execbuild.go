package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lesfarm/lesfarm/agent/artifact"
	"github.com/lesfarm/lesfarm/protocol"
)

// childDeadlineMargin is how long before the run's deadline a runner child
// is killed, so the agent still reports the build's failure before the
// coordinator times the run out.
const childDeadlineMargin = 10 * time.Second

// runBuild runs job with the code the assignment names and says which code
// that was. A run with an executable runs that executable as a child
// process (RunChild), after checking its sha256 on disk; any other run
// uses the embedded runtime, whose build id the provenance then carries.
// A failure of the build's code is a *BuildError.
func (a *Agent) runBuild(ctx context.Context, r *activeRun, job *Job, onDownload func(done, total int64)) ([]protocol.ConfigResult, *protocol.Provenance, error) {
	asg := r.asg
	id, _ := SelfIdentity() // New checked the error
	prov := &protocol.Provenance{AgentBuild: a.fp.AgentBuild, Platform: id.Platform}
	if asg.Executable == nil && a.phone != nil {
		return nil, prov, fmt.Errorf("phone %s runs build executables only; run of build %q names none", a.phone.cfg.Serial, asg.Build)
	}
	if asg.Executable == nil {
		prov.Build, prov.ExecutableSHA256, prov.Embedded = id.BuildID, id.SHA256, true
		prov.RunnerRevision, prov.RunnerGoVersion = id.Revision, id.GoVersion
		res, err := a.runner.Run(ctx, job)
		return res, prov, err
	}
	x := asg.Executable
	prov.Build, prov.ExecutableSHA256, prov.Platform = asg.Build, x.Artifact.SHA256, x.Platform
	if a.phone != nil {
		res, err := a.runOnPhone(ctx, r, job, prov, onDownload)
		return res, prov, err
	}
	h, err := a.executable(ctx, x, onDownload)
	if err != nil {
		return nil, prov, err
	}
	defer h.Release()
	lim := ChildLimits{RAMBudget: a.ramBudget()}
	if !r.deadline.IsZero() {
		lim.Timeout = max(time.Until(r.deadline)-childDeadlineMargin, time.Until(r.deadline)/2)
	}
	res, info, err := a.runner.RunChild(ctx, h.Path, job, lim)
	if info != nil {
		prov.RunnerRevision, prov.RunnerGoVersion, prov.RunnerProtocol = info.Revision, info.GoVersion, info.Protocol
		prov.PeakRSSBytes = info.PeakRSSBytes
		if be := (*BuildError)(nil); errors.As(err, &be) {
			prov.StderrTail = clipTail(info.StderrTail, protocol.MaxStderrTail)
		}
	}
	return res, prov, err
}

// executable fetches a build's executable through the artifact cache (the
// models' disk budget) and checks its sha256 again right before it may
// run (verifiedExecs: hashed unless its file is unchanged since it last
// matched): a file changed on disk since it was verified is removed and
// fetched anew, never executed.
func (a *Agent) executable(ctx context.Context, x *protocol.Executable, onDownload func(done, total int64)) (*artifact.Handle, error) {
	spec := artifact.Spec{URL: x.Artifact.URL, SHA256: x.Artifact.SHA256, Size: x.Artifact.Size}
	for attempt := 0; ; attempt++ {
		h, err := a.cache.Get(ctx, spec, onDownload)
		if err != nil {
			return nil, fmt.Errorf("build executable: %w", err)
		}
		if err := makeExecutable(h.Path); err != nil {
			h.Release()
			return nil, fmt.Errorf("build executable: %w", err)
		}
		got, err := a.verified.check(h.Path, x.Artifact.SHA256)
		if err == nil && got == x.Artifact.SHA256 {
			return h, nil
		}
		h.Release()
		a.log.Warn("agent: build executable changed on disk since it was verified; fetching it again", "sha256", x.Artifact.SHA256, "got", got, "err", err)
		a.cache.Discard(x.Artifact.SHA256)
		if attempt > 0 {
			return nil, fmt.Errorf("build executable: %s still does not match its sha256 after a fresh fetch", x.Artifact.SHA256)
		}
	}
}

// clipTail keeps the last n bytes of s.
func clipTail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

// ramBudget is the memory a runner child may use: the agent's storage
// profile's RAM budget (an emulated phone), else the device's RAM; 0 when
// neither is known.
func (a *Agent) ramBudget() int64 {
	if p := a.runner.Profile; p != nil && p.RAMBudget > 0 {
		return p.RAMBudget
	}
	if a.fp.RAMBytes != nil {
		return *a.fp.RAMBytes
	}
	return 0
}
