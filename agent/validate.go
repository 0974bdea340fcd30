package agent

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/lesfarm/lesfarm/agent/artifact"
	"github.com/lesfarm/lesfarm/jobs"
	"github.com/lesfarm/lesfarm/protocol"
	"github.com/lesfarm/lesfarm/runtime/expert"
)

// deviceLimits is what an assignment is checked against: the device it
// reached and what that device can hold.
type deviceLimits struct {
	// name is the device id the agent serves.
	name string
	// ramBytes is the device's memory; 0 means unknown (no RAM check
	// except against a profile's budget).
	ramBytes int64
	// execPlatform is GOOS/GOARCH of the build executables the agent runs
	// (empty: it runs none); embeddedBuild is its embedded build's id.
	execPlatform, embeddedBuild string
	// resolveProfile returns a config's storage profile (its own, else the
	// agent's; nil for none), or an error for an unknown one.
	resolveProfile func(jobs.Config) (*expert.Profile, error)
}

// limits returns what assignments are checked against on this agent.
func (a *Agent) limits() deviceLimits {
	d := deviceLimits{name: a.cfg.Name, resolveProfile: a.runner.ResolveProfile,
		execPlatform: a.fp.ExecPlatform, embeddedBuild: a.fp.EmbeddedBuild}
	if a.fp.RAMBytes != nil {
		d.ramBytes = *a.fp.RAMBytes
	}
	return d
}

// check refuses work this agent cannot do; see validateAssignment.
func (a *Agent) check(asg *protocol.Assignment) (code, reason string) {
	if code, reason := validateAssignment(asg, a.limits()); code != "" {
		return code, reason
	}
	// A model the device's disk cannot hold is refused before anything is
	// downloaded: as unfit, so the coordinator runs it on another device
	// and blames neither the build nor an attempt (issue 29, finding 10).
	if err := a.cache.CanHold(artifact.Spec{URL: asg.Artifact.URL, SHA256: asg.Artifact.SHA256, Size: asg.Artifact.Size}); err != nil {
		return protocol.RefuseUnsupported, "not enough storage: " + strings.TrimPrefix(err.Error(), "artifact: ")
	}
	return "", ""
}

// validateAssignment refuses an opened (signature-checked) assignment the
// device cannot do, with a protocol.Refuse* code and a one-line reason; it
// returns "", "" when the assignment is acceptable. It refuses an
// assignment for another device, an unknown prompt set, model layout, mode
// or storage profile, a model whose architecture or tensor types this
// build cannot run (when the assignment carries model facts), and a config
// that needs more memory than the device (or its profile's budget) has —
// except one that holds the whole model, which the run skips with a reason
// (skippedConfigs) unless every config of the assignment would be skipped.
// It is pure: it runs before anything is downloaded and touches no state.
func validateAssignment(asg *protocol.Assignment, d deviceLimits) (code, reason string) {
	if asg.DeviceID != d.name {
		return protocol.RefuseWrongDevice, fmt.Sprintf("assignment for device %q reached %q", asg.DeviceID, d.name)
	}
	if code, reason := checkBuild(asg, d); code != "" {
		return code, reason
	}
	spec := &asg.Spec
	if len(spec.ResolvePrompts()) == 0 {
		return protocol.RefuseUnsupported, fmt.Sprintf("prompt set %q is unknown to this agent build", spec.Prompts.Set)
	}
	if l := spec.Model.Layout; l != jobs.LayoutAsIs && l != jobs.LayoutPacked && l != jobs.LayoutPackedCompat && l != "" {
		return protocol.RefuseUnsupported, fmt.Sprintf("model layout %q is not supported", l)
	}
	if asg.Model != nil {
		// Facts from the coordinator: refuse before downloading anything.
		if code, reason := CheckModelSupport(asg.Model); code != "" {
			return code, reason
		}
	}
	skipped := 0
	var firstSkip string
	for _, c := range asg.Configs {
		if !c.Mode.Valid() {
			return protocol.RefuseUnsupported, fmt.Sprintf("config %s: mode %q is not supported", c.Key, c.Mode)
		}
		if c.Mode != jobs.ModeResident {
			if _, err := runtimeMode(c.Mode); err != nil {
				return protocol.RefuseUnsupported, fmt.Sprintf("config %s: %v", c.Key, err)
			}
		}
		why, err := configRAMShortfall(asg, c, d)
		switch {
		case err != nil:
			return protocol.RefuseUnsupported, fmt.Sprintf("config %s: %v", c.Key, err)
		case why == "":
		case holdsWholeModel(c.Mode):
			// Skipped by the run (skippedConfigs), not refused: the rest
			// of the ladder is what a device smaller than its model is for.
			skipped++
			firstSkip = cmp.Or(firstSkip, why)
		default:
			return protocol.RefuseInsufficientRAM, why
		}
	}
	if skipped > 0 && skipped == len(asg.Configs) {
		return protocol.RefuseInsufficientRAM, firstSkip
	}
	return "", ""
}

// holdsWholeModel reports whether a config's mode holds every weight in
// RAM: the resident mode, and the mixed-precision planner while it
// measures.
func holdsWholeModel(m jobs.Mode) bool {
	return m == jobs.ModeResident || m == jobs.ModeMixedPrecision
}

// configRAMShortfall returns why config c needs more memory than the
// device (or the config's profile's budget) has, or "" when it fits or
// the device's memory is unknown. With model facts it counts
// RequiredModelRAM, else the RequiredRAM estimate from the spec. The
// error is an unknown profile.
func configRAMShortfall(asg *protocol.Assignment, c jobs.Config, d deviceLimits) (string, error) {
	prof, err := d.resolveProfile(c)
	if err != nil {
		return "", err
	}
	limit := d.ramBytes
	if prof != nil && prof.RAMBudget > 0 && (limit == 0 || prof.RAMBudget < limit) {
		limit = prof.RAMBudget
	}
	if limit <= 0 {
		return "", nil
	}
	if asg.Model != nil {
		if need, why := RequiredModelRAM(asg.Model, c); need > limit {
			return fmt.Sprintf("needs %s, has %s (config %s: %s)", fmtBytes(need), fmtBytes(limit), c.Key, why), nil
		}
		return "", nil
	}
	if need := RequiredRAM(&asg.Spec, c); need > limit {
		return fmt.Sprintf("config %s needs about %s of RAM, the device has %s", c.Key, jobs.ByteSize(need), jobs.ByteSize(limit)), nil
	}
	return "", nil
}

// skippedConfigs returns the configs of an accepted assignment the device
// skips, by index, with the reason each result carries: a config that
// holds the whole model (holdsWholeModel) on a device that cannot hold it.
// validateAssignment refused the assignment when every config would be
// skipped.
func skippedConfigs(asg *protocol.Assignment, d deviceLimits) map[int]string {
	var out map[int]string
	for _, c := range asg.Configs {
		if !holdsWholeModel(c.Mode) {
			continue
		}
		if why, err := configRAMShortfall(asg, c, d); err == nil && why != "" {
			if out == nil {
				out = map[int]string{}
			}
			out[c.Index] = "skipped: the device cannot hold the whole model: " + why
		}
	}
	return out
}

// withSkipped returns the results of a run's configs in config order: the
// runner's results, and an invalid result with its reason for each
// skipped config.
func withSkipped(all []jobs.Config, res []protocol.ConfigResult, skip map[int]string) []protocol.ConfigResult {
	if len(skip) == 0 {
		return res
	}
	out := slices.Clone(res)
	for _, c := range all {
		if why := skip[c.Index]; why != "" {
			out = append(out, protocol.ConfigResult{ConfigIndex: c.Index, ConfigKey: c.Key, InvalidReason: why})
		}
	}
	slices.SortStableFunc(out, func(a, b protocol.ConfigResult) int { return cmp.Compare(a.ConfigIndex, b.ConfigIndex) })
	return out
}

// RequiredRAM estimates the memory a config needs: the whole model for the
// resident mode; the expert budget (at most the model) plus a tenth of the
// model for the resident weights otherwise.
func RequiredRAM(spec *jobs.Spec, c jobs.Config) int64 {
	size := int64(spec.Model.Size)
	if holdsWholeModel(c.Mode) {
		return size
	}
	return min(c.Budget.Resolve(size), size) + size/10
}

// checkBuild refuses a build the agent must not run: an executable when it
// executes none or for another platform, or another agent's embedded
// build. An agent never runs a build it was not asked for: a run with an
// executable runs that executable, any other run the embedded runtime,
// whose build id the result then carries.
func checkBuild(asg *protocol.Assignment, d deviceLimits) (code, reason string) {
	switch {
	case asg.Executable != nil && d.execPlatform == "":
		return protocol.RefuseWrongBuild, fmt.Sprintf("build %q is an executable and this agent runs its embedded build only", asg.Build)
	case asg.Executable != nil && asg.Executable.Platform != d.execPlatform:
		return protocol.RefuseWrongBuild, fmt.Sprintf("build %q executable is for %s, this agent runs %s", asg.Build, asg.Executable.Platform, d.execPlatform)
	case asg.Executable == nil && strings.HasPrefix(asg.Build, "embedded-") && asg.Build != d.embeddedBuild:
		return protocol.RefuseWrongBuild, fmt.Sprintf("build %q is another agent's embedded runtime (this agent embeds %s)", asg.Build, d.embeddedBuild)
	}
	return "", ""
}
