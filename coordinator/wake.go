package coordinator

import (
	"sync"

	"github.com/lesfarm/lesfarm/coordinator/store"
)

// onRunNotice wakes the dispatcher when a run change may make a placement
// possible: a run queued (a trigger, a requeue) or ended (its device is
// free), by this coordinator, another one or any other writer of the
// database, so placement does not wait for the next DispatchInterval tick.
// A zero notice (the listener reconnected, notices may have been lost)
// wakes it too. Assigned and running notices place nothing, and neither
// does the end of a run whose result this coordinator committed: its
// device is already being placed on its own (wakeFreed).
func (c *Coordinator) onRunNotice(n store.RunNotice) {
	switch n.State {
	case store.RunAssigned, store.RunRunning:
		return
	}
	if store.TerminalState(n.State) && c.work.ownEnd(n.RunID) {
		return
	}
	c.Wake()
}

// wakeFreed asks the dispatcher to place the device a committed result
// just freed, reading only that device (and the others freed meanwhile)
// instead of every idle one: in a busy fleet the devices that just
// finished are the ones to place.
func (c *Coordinator) wakeFreed(r *store.Run) {
	c.work.freed(r)
	c.signal()
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
}

func newDispatchWork() *dispatchWork {
	return &dispatchWork{devices: map[string]bool{}, ended: map[int64]bool{}}
}

func (w *dispatchWork) setFull() {
	w.mu.Lock()
	w.full = true
	w.mu.Unlock()
}

func (w *dispatchWork) freed(r *store.Run) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if r.DeviceID != "" {
		w.devices[r.DeviceID] = true
	}
	if store.TerminalState(r.State) {
		if len(w.ended) >= 1<<16 {
			clear(w.ended) // notices that never came back (lost): forget them
		}
		w.ended[r.ID] = true
	}
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

// take returns the work pending and resets it: full, or the freed
// devices (nil when there are none).
func (w *dispatchWork) take() (full bool, devices []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	full, w.full = w.full, false
	for id := range w.devices {
		devices = append(devices, id)
	}
	clear(w.devices)
	return full, devices
}
