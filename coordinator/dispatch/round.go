package dispatch

import (
	"sync"

	"github.com/lesfarm/lesfarm/coordinator/scheduler"
	"github.com/lesfarm/lesfarm/coordinator/store"
)

// pickPairs picks the best run of the shared head for each device (marking
// it taken), for one batch claim. It returns the pairs, the devices left
// for place (no run in the head, or an emulated device whose host's
// devices take turns: ClaimRun) and the paired devices by id.
func (dp *Dispatcher) pickPairs(r *round, devs []store.PlacementDevice) (pairs []store.ClaimPair, rest []*store.PlacementDevice,
	byDevice map[string]*store.PlacementDevice) {
	byDevice = map[string]*store.PlacementDevice{}
	for i := range devs {
		d := &devs[i]
		if d.Emulated && d.Labels[store.HostLabel] != "" {
			rest = append(rest, d) // its host's devices take turns: ClaimRun
			continue
		}
		sd := d.Fit()
		cd, ok := r.pick(sd, r.head, nil)
		if !ok {
			rest = append(rest, d)
			continue
		}
		pairs = append(pairs, store.ClaimPair{DeviceID: d.ID, RunID: cd.RunID})
		byDevice[d.ID] = d
	}
	return pairs, rest, byDevice
}

// round is the shared state of one placement pass.
type round struct {
	mu        sync.Mutex
	load      scheduler.Load
	taken     map[int64]bool
	head      []scheduler.Candidate
	truncated bool
	granted   int
	// shared are the runs picked by every pass of this coordinator in
	// flight (nil: this pass alone); a run another pass picked is skipped,
	// and skippedReserved says one was.
	shared          *reservations
	skippedReserved bool
}

// releaseAll gives back the pass's picks: claimed runs are no longer
// queued, and the others may be picked again.
func (r *round) releaseAll() {
	if r.shared == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for id := range r.taken {
		r.shared.release(id)
	}
}

// untake gives back one run (the device refused it as unfit).
func (r *round) untake(id int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.taken, id)
	if r.shared != nil {
		r.shared.release(id)
	}
}

func toSched(cs []store.Candidate) []scheduler.Candidate {
	out := make([]scheduler.Candidate, len(cs))
	for i, cd := range cs {
		out[i] = scheduler.Candidate{RunID: cd.RunID, Suite: cd.Suite, Priority: cd.Priority, QueuedAt: cd.QueuedAt, Selector: cd.Selector,
			TargetDeviceID: cd.TargetDeviceID, Build: cd.Build, Needs: cd.Needs}
	}
	return out
}

// pick returns the best untaken candidate for d from cands and marks it
// taken, or false. Runs d refused as unfit are skipped (tried is every run
// this device already tried in the round).
func (r *round) pick(d *scheduler.Device, cands []scheduler.Candidate, tried map[int64]bool) (scheduler.Candidate, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	cd, ok := scheduler.Best(d, cands, r.load, func(id int64) bool {
		if tried[id] || r.taken[id] {
			return true
		}
		if r.shared != nil && r.shared.has(id) {
			r.skippedReserved = true
			return true
		}
		return false
	})
	if ok {
		r.taken[cd.RunID] = true
		if r.shared != nil {
			r.shared.add(cd.RunID)
		}
	}
	return cd, ok
}
