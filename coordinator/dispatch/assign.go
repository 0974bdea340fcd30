package dispatch

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/artifact"
	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/jobs"
	"github.com/lesfarm/lesfarm/protocol"
)

// artifactFor says where the agent downloads the model.
func (dp *Dispatcher) artifactFor(spec *jobs.Spec) protocol.Artifact {
	m := spec.Model
	a := protocol.Artifact{URL: m.URL, SHA256: m.SHA256, Size: int64(m.Size), Name: m.Name}
	if a.URL == "" && m.Path == "" && dp.cfg.ArtifactBaseURL != "" {
		a.URL = strings.TrimRight(dp.cfg.ArtifactBaseURL, "/") + "/v1/artifacts/" + m.SHA256
	}
	return a
}

// executableFor returns the executable the device runs for the grant's
// build (nil for a run without a registered exec build), or why the device
// cannot run the build. An exec build's run never goes out without its
// executable: the agent would run its embedded runtime instead.
func (dp *Dispatcher) executableFor(ctx context.Context, g *store.Grant) (*protocol.Executable, string) {
	kind, x, err := dp.store.ExecutableForDevice(ctx, g.Run.Build, g.Run.DeviceID)
	switch {
	case err != nil:
		return nil, "cannot read the build's executable: " + err.Error()
	case kind == "exec" && x == nil:
		return nil, "build " + g.Run.Build + " has no executable for the device's platform"
	case x == nil:
		return nil, ""
	}
	a := protocol.Artifact{SHA256: x.SHA256, Size: x.SizeBytes, Name: g.Run.Build + " " + x.Platform}
	if dp.cfg.ArtifactBaseURL != "" {
		a.URL = strings.TrimRight(dp.cfg.ArtifactBaseURL, "/") + "/v1/artifacts/" + x.SHA256
	}
	return &protocol.Executable{Platform: x.Platform, Artifact: a}, ""
}

// modelFacts returns the recorded facts of the spec's model when its
// sha256 is in the artifact store (content-addressed, so the facts hold
// whatever URL serves it) and it is not a device-local path, or nil.
// An artifact stored before uploads were analysed (migration 00024) is
// analysed here, once. Facts that do not validate are left out rather than
// failing the assignment: the agent then checks after downloading, as
// before.
func (dp *Dispatcher) modelFacts(ctx context.Context, spec *jobs.Spec) *protocol.ModelFacts {
	m := spec.Model
	if m.Path != "" || m.SHA256 == "" {
		return nil
	}
	if f, ok := dp.facts.get(m.SHA256, time.Now()); ok {
		return f
	}
	f, analysed, err := dp.store.ArtifactModelFacts(ctx, m.SHA256)
	if err == nil && !analysed && dp.cfg.ArtifactDir != "" {
		// Stored before uploads were analysed: read its header once now.
		var files *artifact.Files
		if files, err = artifact.New(artifact.Config{Dir: dp.cfg.ArtifactDir}); err == nil {
			f, err = artifact.RecordModelFacts(ctx, dp.store, files, m.SHA256)
		}
	}
	if err != nil {
		dp.log.WarnContext(ctx, "dispatch: model facts unavailable", "sha256", m.SHA256, "err", err)
		return nil
	}
	if f != nil && f.Validate() != nil {
		f = nil
	}
	dp.facts.put(m.SHA256, f, time.Now())
	return f
}

// sendAssignment pushes a granted lease to the agent and records its answer.
func (dp *Dispatcher) sendAssignment(g *store.Grant, grantedAt time.Time) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(dp.ctx), dp.cfg.AssignTimeout+10*time.Second)
	defer cancel()
	log := dp.log.With("run_id", g.Run.ID, "device_id", g.Run.DeviceID, "token", g.Token)
	release := func(reason, outcome string, fail bool) {
		// A busy agent, or one that never answered (its subscription is gone:
		// it died before the coordinator noticed), did not start the run, so
		// the attempt is given back; liveness marks a dead device lost.
		transient := outcome == "busy" || outcome == "unreachable" || outcome == "unfit"
		backoff := time.Duration(min(g.Run.Attempts, 6)) * time.Second
		err := dp.store.ReleaseAssignment(ctx, &store.ReleaseParams{RunID: g.Run.ID, Token: g.Token, Reason: reason, Outcome: outcome,
			Fail: fail, Refund: transient, Backoff: backoff})
		if err != nil && !errors.Is(err, store.ErrStaleToken) {
			log.ErrorContext(ctx, "dispatch: release assignment", "err", err)
		}
		log.WarnContext(ctx, "dispatch: assignment not accepted", "reason", reason, "failed", fail)
		dp.Wake()
	}
	spec := g.Job.Spec
	exe, why := dp.executableFor(ctx, g)
	if why != "" {
		release(why, "unfit", false)
		return
	}
	a := &protocol.Assignment{Executable: exe, RunID: g.Run.ID, Token: g.Token, Attempt: g.Run.Attempts, DeviceID: g.Run.DeviceID, Session: dp.deviceSession(ctx, g.Run.DeviceID), JobID: g.Job.ID,
		Suite: g.Run.Suite, Build: g.Run.Build, GitSHA: g.Run.GitSHA, Spec: spec, Configs: spec.Expand(),
		Artifact: dp.artifactFor(&spec), Model: dp.modelFacts(ctx, &spec), LeaseExpiresAt: g.LeaseExpiresAt, Deadline: g.Deadline, IssuedAt: time.Now(),
		// The run's timeout, counted from now: the grant was made a
		// moment ago, so this errs late by that moment, never early.
		DeadlineInMS: g.Run.Timeout.Milliseconds()}
	data, err := protocol.SignAssignment(a, dp.signKey)
	if err != nil {
		release("cannot build assignment: "+err.Error(), "invalid", true)
		return
	}
	start := time.Now()
	dp.phases.observe(PhaseGrantToPublish, start.Sub(grantedAt))
	msg, err := dp.nc.Request(protocol.AssignSubject(g.Run.DeviceID), data, dp.cfg.AssignTimeout)
	replied := time.Now()
	if err != nil {
		release("agent did not acknowledge the assignment: "+err.Error(), "unreachable", false)
		return
	}
	rep, err := protocol.DecodeAssignReply(msg.Data)
	if err == nil && (rep.RunID != g.Run.ID || rep.Token != g.Token) {
		err = fmt.Errorf("reply is for run %d token %d", rep.RunID, rep.Token)
	}
	if err != nil {
		dp.rejects.Observe(err)
		release("bad assignment reply: "+err.Error(), "bad_reply", false)
		return
	}
	if !rep.Accepted {
		fail := rep.Code == protocol.RefuseMalformed
		outcome := "refused"
		switch rep.Code {
		case protocol.RefuseBusy, protocol.RefuseShuttingDown:
			outcome = "busy"
		case protocol.RefuseUnsupported, protocol.RefuseInsufficientRAM:
			// Not this device: another one may run it. The attempt is
			// given back, and the lease outcome "unfit" keeps this device
			// from claiming the run for store.UnfitFor; a run pinned to
			// this device can go nowhere else.
			if g.Run.TargetDeviceID != "" && g.Run.TargetDeviceID == g.Run.DeviceID {
				fail = true
			} else {
				outcome = "unfit"
			}
		}
		release(fmt.Sprintf("refused by agent (%s): %s", rep.Code, rep.Reason), outcome, fail)
		return
	}
	dp.phases.observe(PhaseAgentReply, replied.Sub(start))
	err = dp.acks.ack(ctx, g.Run.ID, g.Token, dp.cfg.LeaseTTL)
	dp.phases.observe(PhaseAckCommit, time.Since(replied))
	if err != nil {
		// Cancelled or failed over while the assignment was in flight; the
		// agent learns from its next heartbeat reply.
		log.WarnContext(ctx, "dispatch: ack of a lease no longer current", "err", err)
		return
	}
	dp.assignLatency.observe(time.Since(start))
	log.InfoContext(ctx, "dispatch: assignment accepted", "rtt", time.Since(start).Round(time.Microsecond))
}

// CancelRun pushes the cancellation of a run (already marked cancelled in
// the store) to its agent. An unreachable agent learns it from its next
// heartbeat reply, so CancelRun only logs delivery failures. It implements
// api.Canceller.
func (dp *Dispatcher) CancelRun(ctx context.Context, runID int64) error {
	r, err := dp.store.GetRun(ctx, runID)
	if err != nil {
		return err
	}
	// The same words as a heartbeat reply's notice (store.leaseGoneReason),
	// so the agent reports one reason whichever path reaches it first.
	reason := "cancelled"
	if r.CancelReason != "" {
		reason += ": " + r.CancelReason
	}
	dp.pushCancel(ctx, r.ID, r.Token, r.DeviceID, reason)
	dp.Wake() // the device may be free now
	return nil
}

func (dp *Dispatcher) pushCancel(ctx context.Context, runID, token int64, deviceID, reason string) {
	if deviceID == "" || token == 0 {
		return
	}
	data, err := protocol.Encode(&protocol.Cancel{RunID: runID, Token: token, Reason: reason})
	if err != nil {
		dp.log.ErrorContext(ctx, "dispatch: encode cancel", "err", err)
		return
	}
	msg, err := dp.nc.RequestWithContext(ctx, protocol.CancelSubject(deviceID), data)
	if err != nil {
		dp.log.WarnContext(ctx, "dispatch: cancel not delivered, agent learns at next heartbeat", "run_id", runID, "device_id", deviceID, "err", err)
		return
	}
	rep, err := protocol.DecodeCancelReply(msg.Data)
	if err != nil {
		dp.rejects.Observe(err)
		return
	}
	dp.log.InfoContext(ctx, "dispatch: cancel delivered", "run_id", runID, "device_id", deviceID, "known", rep.Known)
}
