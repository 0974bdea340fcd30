// Package scheduler is the coordinator's pure placement logic: whether a
// device satisfies a job's selector, and in which order a device should try
// the queued runs offered to it (priority, then fairness between suites,
// then age). It does no I/O; the store supplies candidates and claims runs
// with FOR UPDATE SKIP LOCKED, and the coordinator drives the loop.
//
// The store's SQL prefilter (store.Candidates) mirrors Match so that the
// database returns only plausible candidates; Match is the final word.
package scheduler

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/lesfarm/lesfarm/jobs"
)

// Device is what placement knows about an idle device.
type Device struct {
	ID          string
	Platform    string
	DeviceModel string
	RAMBytes    int64
	Emulated    bool
	// Labels are the effective labels (agent labels overlaid with operator
	// labels).
	Labels map[string]string
	// ExecPlatform is GOOS/GOARCH of the build executables the device's
	// agent runs ("" when it runs its embedded build only), and
	// EmbeddedBuild the id of its embedded build.
	ExecPlatform, EmbeddedBuild string
}

// Match reports whether d satisfies sel, and when it does not, a short
// reason naming the first failed condition.
func Match(sel *jobs.Selector, d *Device) (bool, string) {
	if sel.Platform != "" && sel.Platform != d.Platform {
		return false, "platform " + d.Platform + " is not " + sel.Platform
	}
	if sel.DeviceModel != "" && !strings.EqualFold(sel.DeviceModel, d.DeviceModel) {
		return false, "device model " + d.DeviceModel + " is not " + sel.DeviceModel
	}
	if sel.MinRAM > 0 && d.RAMBytes < int64(sel.MinRAM) {
		return false, "RAM " + jobs.ByteSize(d.RAMBytes).String() + " is below " + sel.MinRAM.String()
	}
	if sel.Emulated != nil && *sel.Emulated != d.Emulated {
		if d.Emulated {
			return false, "device is emulated"
		}
		return false, "device is not emulated"
	}
	for k, v := range sel.Labels {
		if got, ok := d.Labels[k]; !ok || got != v {
			return false, "label " + k + "=" + v + " missing"
		}
	}
	return true, ""
}

// Candidate is a queued run offered to a device.
type Candidate struct {
	RunID    int64
	Suite    string
	Priority int
	QueuedAt time.Time
	Selector jobs.Selector
	// TargetDeviceID pins the run to one device; empty means any.
	TargetDeviceID string
	// Build is the run's build id and Needs what that build asks of a
	// device (nil: no build, or a label that is not a registered build,
	// which any device runs with its embedded runtime).
	Build string
	Needs *BuildNeeds
}

// BuildNeeds is what a registered build asks of a device: an agent that
// executes one of its executables' platforms, or, for an embedded build
// (an agent's own runtime), the very agent that embeds it.
type BuildNeeds struct {
	Embedded  bool
	Platforms []string
}

// BuildMatch reports whether d can run a run of build with needs, and when
// it cannot, a short reason. An agent never runs a build it was not asked
// for, so this is a hard constraint like the selector.
func BuildMatch(build string, needs *BuildNeeds, d *Device) (bool, string) {
	switch {
	case needs == nil:
		return true, ""
	case needs.Embedded:
		if d.EmbeddedBuild == build {
			return true, ""
		}
		return false, "build " + build + " is another agent's embedded runtime"
	case d.ExecPlatform == "":
		return false, "the device runs its embedded build only, build " + build + " is an executable"
	case !slices.Contains(needs.Platforms, d.ExecPlatform):
		return false, "build " + build + " has no executable for " + d.ExecPlatform + " (has " + strings.Join(needs.Platforms, ", ") + ")"
	}
	return true, ""
}

// Load is the number of active runs per suite.
type Load map[string]int

// Order returns the candidates that d may run, best first:
//
//  1. higher priority first;
//  2. among equal priorities, the suite with fewer active runs first (so
//     one suite with a deep queue cannot starve the others);
//  3. then the run queued longest ago, then the lower run id.
//
// It does not modify cands.
func Order(d *Device, cands []Candidate, load Load) []Candidate {
	out := make([]Candidate, 0, len(cands))
	for _, c := range cands {
		if fits(d, &c) {
			out = append(out, c)
		}
	}
	slices.SortStableFunc(out, func(a, b Candidate) int { return compare(&a, &b, load) })
	return out
}

// Best returns the candidate Order would put first among those skip does
// not exclude, without building or sorting the list: a placement pass asks
// this once per idle device over the whole queue head, so sorting a
// thousand candidates for each of a thousand devices was most of its CPU.
// skip may be nil.
func Best(d *Device, cands []Candidate, load Load, skip func(runID int64) bool) (Candidate, bool) {
	best := -1
	for i := range cands {
		c := &cands[i]
		if (best >= 0 && compare(c, &cands[best], load) >= 0) || (skip != nil && skip(c.RunID)) || !fits(d, c) {
			continue
		}
		best = i
	}
	if best < 0 {
		return Candidate{}, false
	}
	return cands[best], true
}

// fits reports whether d may run c: pinned to it or to no device, and
// matching its selector.
func fits(d *Device, c *Candidate) bool {
	if c.TargetDeviceID != "" && c.TargetDeviceID != d.ID {
		return false
	}
	if ok, _ := BuildMatch(c.Build, c.Needs, d); !ok {
		return false
	}
	ok, _ := Match(&c.Selector, d)
	return ok
}

// compare is Order's ordering: negative when a goes before b.
func compare(a, b *Candidate, load Load) int {
	if a.Priority != b.Priority {
		return cmp.Compare(b.Priority, a.Priority)
	}
	if la, lb := load[a.Suite], load[b.Suite]; la != lb {
		return cmp.Compare(la, lb)
	}
	if c := a.QueuedAt.Compare(b.QueuedAt); c != 0 {
		return c
	}
	return cmp.Compare(a.RunID, b.RunID)
}

// HeartbeatInterval is the interval agents are told to heartbeat at for a
// TTL: a third of it, so two heartbeats may be lost before a device is
// declared lost.
func HeartbeatInterval(ttl time.Duration) time.Duration { return ttl / 3 }
