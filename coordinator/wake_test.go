package coordinator

import (
	"slices"
	"testing"

	"github.com/lesfarm/lesfarm/coordinator/store"
)

// TestDispatchWork: a result's freed device asks for a pass over that
// device alone; any other wake-up asks for a full pass, which covers the
// freed devices; the notice of a run whose end this coordinator committed
// is recognised once, and a requeue's is not (it queued a run).
func TestDispatchWork(t *testing.T) {
	w := newDispatchWork()
	if full, devs := w.take(); full || devs != nil {
		t.Fatalf("nothing pending: full %v, devices %v", full, devs)
	}
	w.freed(&store.Run{ID: 1, DeviceID: "a", State: store.RunSucceeded})
	w.freed(&store.Run{ID: 2, DeviceID: "b", State: store.RunQueued}) // requeued: its device is free too
	w.freed(&store.Run{ID: 3, DeviceID: "a", State: store.RunFailed})
	full, devs := w.take()
	slices.Sort(devs)
	if full || !slices.Equal(devs, []string{"a", "b"}) {
		t.Fatalf("after results: full %v, devices %v, want a and b alone", full, devs)
	}
	if full, devs := w.take(); full || devs != nil {
		t.Fatalf("taken twice: full %v, devices %v", full, devs)
	}
	for _, c := range []struct {
		run  int64
		want bool
	}{{1, true}, {1, false}, {2, false}, {3, true}, {4, false}} {
		if got := w.ownEnd(c.run); got != c.want {
			t.Errorf("ownEnd(%d) = %v, want %v", c.run, got, c.want)
		}
	}
	w.freed(&store.Run{ID: 5, DeviceID: "c", State: store.RunSucceeded})
	w.setFull()
	if full, devs := w.take(); !full || len(devs) != 1 {
		t.Fatalf("full wake-up: full %v, devices %v", full, devs)
	}
}
