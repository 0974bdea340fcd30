package coordinator

import (
	"github.com/lesfarm/lesfarm/coordinator/store"
)

// onRunNotice wakes the dispatcher when a run change may make a placement
// possible: a run queued (a trigger, a requeue) or ended (its device is
// free), by this coordinator, another one or any other writer of the
// database, so placement does not wait for the next DispatchInterval tick.
// A zero notice (the listener reconnected, notices may have been lost)
// wakes it too. Assigned and running notices place nothing.
func (c *Coordinator) onRunNotice(n store.RunNotice) {
	switch n.State {
	case store.RunAssigned, store.RunRunning:
		return
	}
	c.Wake()
}
