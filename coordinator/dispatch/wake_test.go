package dispatch

import (
	"slices"
	"testing"

	"github.com/lesfarm/lesfarm/coordinator/scheduler"
	"github.com/lesfarm/lesfarm/coordinator/store"
)

// TestDispatchWork: a result's freed device asks for a pass over that
// device alone; any other wake-up asks for a full pass, taken apart from
// the freed devices; the notice of a run whose end this coordinator committed
// is recognised once, and a requeue's is not (it queued a run).
func TestDispatchWork(t *testing.T) {
	w := newDispatchWork()
	if full, devs := w.takeFull(), w.takeFreed(); full || devs != nil {
		t.Fatalf("nothing pending: full %v, devices %v", full, devs)
	}
	w.freed(&store.Run{ID: 1, DeviceID: "a", State: store.RunSucceeded})
	w.freed(&store.Run{ID: 2, DeviceID: "b", State: store.RunQueued}) // requeued: its device is free too
	w.freed(&store.Run{ID: 3, DeviceID: "a", State: store.RunFailed})
	full, devs := w.takeFull(), w.takeFreed()
	slices.Sort(devs)
	if full || !slices.Equal(devs, []string{"a", "b"}) {
		t.Fatalf("after results: full %v, devices %v, want a and b alone", full, devs)
	}
	if full, devs := w.takeFull(), w.takeFreed(); full || devs != nil {
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
	// A device its result's commit placed is not queued again.
	w.placedWithResult("d")
	if w.freed(&store.Run{ID: 6, DeviceID: "d", State: store.RunSucceeded}) {
		t.Fatal("a device placed in its result's commit was queued")
	}
	if !w.ownEnd(6) {
		t.Fatal("the end of a run placed in commit is not recognised as own")
	}
	if !w.freed(&store.Run{ID: 5, DeviceID: "c", State: store.RunSucceeded}) {
		t.Fatal("a freed device was not queued")
	}
	w.setFull()
	// The full and the freed work are taken apart (dispatchLoop and
	// freedLoop): a full wake-up leaves the freed device pending.
	if full, devs := w.takeFull(), w.takeFreed(); !full || !slices.Equal(devs, []string{"c"}) {
		t.Fatalf("full wake-up: full %v, devices %v", full, devs)
	}
	if w.takeFull() {
		t.Fatal("full taken twice")
	}
}

// TestRoundReservations: two passes in flight at once never pick the same
// run, a run given back (unfit) or released at a pass's end can be picked
// again, and a pass that found only reserved runs says so.
func TestRoundReservations(t *testing.T) {
	shared := newReservations()
	head := []scheduler.Candidate{{RunID: 1, Suite: "s"}, {RunID: 2, Suite: "s"}}
	a := &round{load: scheduler.Load{}, taken: map[int64]bool{}, head: head, shared: shared}
	b := &round{load: scheduler.Load{}, taken: map[int64]bool{}, head: head, shared: shared}
	dev := func(id string) *scheduler.Device { return &scheduler.Device{ID: id} }
	ca, ok := a.pick(dev("x"), head, nil)
	if !ok {
		t.Fatal("first pass picked nothing")
	}
	cb, ok := b.pick(dev("y"), head, nil)
	if !ok || cb.RunID == ca.RunID {
		t.Fatalf("second pass picked %v (ok %v), first had %d", cb.RunID, ok, ca.RunID)
	}
	if _, ok := b.pick(dev("z"), head, nil); ok || !b.skippedReserved {
		t.Fatalf("third pick: ok %v, skippedReserved %v; want nothing, and the reservation seen", ok, b.skippedReserved)
	}
	a.untake(ca.RunID)
	if c, ok := b.pick(dev("z"), head, nil); !ok || c.RunID != ca.RunID {
		t.Fatalf("after untake: picked %v (ok %v), want %d", c.RunID, ok, ca.RunID)
	}
	b.releaseAll()
	if shared.has(1) || shared.has(2) {
		t.Fatalf("released runs still reserved: %v", shared.m)
	}
	if c, ok := a.pick(dev("w"), head, nil); !ok {
		t.Fatalf("after release: picked %v (ok %v)", c.RunID, ok)
	}
}

// TestDeviceReservations: a device one pass read is left out of another
// pass's until released.
func TestDeviceReservations(t *testing.T) {
	r := newReservations()
	devs := []store.PlacementDevice{{ID: "a"}, {ID: "b"}}
	got, held := r.takeDevices(devs)
	if len(got) != 2 || !slices.Equal(held, []string{"a", "b"}) {
		t.Fatalf("first pass: %v, held %v", got, held)
	}
	got2, held2 := r.takeDevices([]store.PlacementDevice{{ID: "b"}, {ID: "c"}})
	if len(got2) != 1 || got2[0].ID != "c" || !slices.Equal(held2, []string{"c"}) {
		t.Fatalf("second pass: %v, held %v; want c alone", got2, held2)
	}
	r.releaseDevices(held)
	if got3, _ := r.takeDevices(devs); len(got3) != 2 {
		t.Fatalf("after release: %v", got3)
	}
	if len(devs) != 2 || devs[0].ID != "a" || devs[1].ID != "b" {
		t.Fatalf("input modified: %v", devs)
	}
}
