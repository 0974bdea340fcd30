package dispatch

import (
	"sync"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/store"
)

// Notice wakes the dispatcher when a run change may make a placement
// possible: a run queued (a trigger, a requeue) or ended (its device is
// free), by this coordinator, another one or any other writer of the
// database, so placement does not wait for the next DispatchInterval tick.
// A zero notice (the listener reconnected, notices may have been lost)
// wakes it too. Assigned and running notices place nothing, and neither
// does the end of a run whose result this coordinator committed: its
// device is already being placed on its own (Freed).
func (dp *Dispatcher) Notice(n store.RunNotice) {
	switch n.State {
	case store.RunAssigned, store.RunRunning:
		return
	}
	if store.TerminalState(n.State) && dp.work.ownEnd(n.RunID) {
		return
	}
	dp.Wake()
}

// Freed asks the freed-device placer (freedLoop) to place the device
// a committed result just freed, reading only that device (and the others
// freed meanwhile) instead of every idle one: in a busy fleet the devices
// that just finished are the ones to place. It does not wait for a full
// round in progress.
func (dp *Dispatcher) Freed(r *store.Run) {
	if !dp.work.freed(r) {
		return
	}
	dp.phases.freedAt(r.DeviceID, time.Now())
	select {
	case dp.wakeFreedCh <- struct{}{}:
	default:
	}
}

// dispatchWork is what the next placement round must cover: every idle
// device (full: a run was queued, a device came back, the tick) or only
// the devices that results freed since the last round.
type dispatchWork struct {
	mu      sync.Mutex
	full    bool
	devices map[string]bool
	// ended are runs whose result this coordinator committed, until their
	// notice comes back.
	ended map[int64]bool
	// placed are devices granted their next run by CompleteRuns, right
	// after their result committed, until that result is reported Committed.
	placed map[string]bool
}

func newDispatchWork() *dispatchWork {
	return &dispatchWork{devices: map[string]bool{}, ended: map[int64]bool{}, placed: map[string]bool{}}
}

// placedWithResult records that device id was granted a run by
// CompleteRuns right after the result that freed it committed: that
// result's freed() does not queue it.
func (w *dispatchWork) placedWithResult(id string) {
	w.mu.Lock()
	if len(w.placed) >= 1<<16 {
		clear(w.placed)
	}
	w.placed[id] = true
	w.mu.Unlock()
}

func (w *dispatchWork) setFull() {
	w.mu.Lock()
	w.full = true
	w.mu.Unlock()
}

// freed queues the device of committed result r for a freed-device pass
// and reports whether it did (not when CompleteRuns already placed it).
func (w *dispatchWork) freed(r *store.Run) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	queued := false
	if r.DeviceID != "" && w.placed[r.DeviceID] {
		delete(w.placed, r.DeviceID)
	} else if r.DeviceID != "" {
		w.devices[r.DeviceID] = true
		queued = true
	}
	if store.TerminalState(r.State) {
		if len(w.ended) >= 1<<16 {
			clear(w.ended) // notices that never came back (lost): forget them
		}
		w.ended[r.ID] = true
	}
	return queued
}

// ownEnd reports whether run id's end was committed by this coordinator's
// results (and forgets it).
func (w *dispatchWork) ownEnd(id int64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	ok := w.ended[id]
	delete(w.ended, id)
	return ok
}

// takeFull reports whether a full round is pending and resets it.
func (w *dispatchWork) takeFull() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	full := w.full
	w.full = false
	return full
}

// takeFreed returns the devices freed since the last call (nil when there
// are none) and forgets them.
func (w *dispatchWork) takeFreed() (devices []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for id := range w.devices {
		devices = append(devices, id)
	}
	clear(w.devices)
	return devices
}

// reservations are the queued runs that a placement pass of this
// coordinator has picked and not yet claimed or given up. The full rounds
// and the freed-device passes run concurrently and read the same head of
// the queue: without them both would propose the same best runs, and the
// loser of each claim would fall back to one claim per device.
//
// The devices a pass read as idle are reserved too (devices): a device
// another pass read is that pass's to place, so two passes never propose
// runs for one device (the loser of such a claim tried its other
// candidates one claim at a time).
type reservations struct {
	mu      sync.Mutex
	m       map[int64]bool
	devices map[string]bool
}

func newReservations() *reservations {
	return &reservations{m: map[int64]bool{}, devices: map[string]bool{}}
}

// takeDevices reserves the devices of devs no other pass holds and returns
// those (the others are left out), with their ids for releaseDevices.
func (r *reservations) takeDevices(devs []store.PlacementDevice) ([]store.PlacementDevice, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := devs[:0:0]
	var ids []string
	for _, d := range devs {
		if r.devices[d.ID] {
			continue
		}
		r.devices[d.ID] = true
		out = append(out, d)
		ids = append(ids, d.ID)
	}
	return out, ids
}

// takeDeviceIDs reserves the devices ids no other pass holds and returns
// those.
func (r *reservations) takeDeviceIDs(ids []string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, id := range ids {
		if id == "" || r.devices[id] {
			continue
		}
		r.devices[id] = true
		out = append(out, id)
	}
	return out
}

func (r *reservations) releaseDevices(ids []string) {
	r.mu.Lock()
	for _, id := range ids {
		delete(r.devices, id)
	}
	r.mu.Unlock()
}

func (r *reservations) has(id int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.m[id]
}

// headExtra is how much longer than its own need a pass reads the queue
// head: by the runs reserved now, plus a margin for those reserved while
// its read is on the way.
func (r *reservations) headExtra() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.m) + 64
}

func (r *reservations) add(id int64) {
	r.mu.Lock()
	r.m[id] = true
	r.mu.Unlock()
}

func (r *reservations) release(ids ...int64) {
	r.mu.Lock()
	for _, id := range ids {
		delete(r.m, id)
	}
	r.mu.Unlock()
}
