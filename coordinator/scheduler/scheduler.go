// Package scheduler is the coordinator's pure placement logic: in which
// order a device should try the queued runs offered to it (priority, then
// fairness between suites, then age), among those it can run
// (coordinator/fit). It does no I/O; the store supplies snapshots and
// candidates and claims runs with FOR UPDATE SKIP LOCKED, and
// coordinator/dispatch drives the loop. The store never calls it.
package scheduler

import (
	"cmp"
	"slices"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/fit"
	"github.com/lesfarm/lesfarm/jobs"
)

// Device is what placement knows about an idle device (coordinator/fit).
type Device = fit.Device

// BuildNeeds is what a registered build asks of a device (coordinator/fit).
type BuildNeeds = fit.BuildNeeds

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
	if ok, _ := fit.BuildMatch(c.Build, c.Needs, d); !ok {
		return false
	}
	ok, _ := fit.Match(&c.Selector, d)
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
