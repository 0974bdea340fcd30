package store_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/lesfarm/lesfarm/coordinator/store"
)

// TestPlacementSnapshot: one round trip reads the idle devices (all, or
// only the ones asked for), the suites' load and the queue's head, and
// nothing while no run is queued.
func TestPlacementSnapshot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := open(t)
	for i := range 4 {
		addDevice(t, st, fmt.Sprintf("pl-%d", i), nil)
	}
	snap, err := st.Placement(ctx, &store.PlacementParams{Limit: 100})
	if err != nil || len(snap.Devices) != 0 || len(snap.Head) != 0 {
		t.Fatalf("empty queue: %+v %v, want no devices and no head", snap, err)
	}
	// Two runs: one claimed by pl-0 (its suite's load is 1), one queued.
	for range 2 {
		if _, _, err := st.CreateRuns(ctx, &store.CreateRunsParams{Spec: smoke(t)}); err != nil {
			t.Fatal(err)
		}
	}
	g := claim(t, st, "pl-0")
	snap, err = st.Placement(ctx, &store.PlacementParams{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, d := range snap.Devices {
		ids = append(ids, d.ID)
	}
	if want := []string{"pl-1", "pl-2", "pl-3"}; !slices.Equal(ids, want) {
		t.Errorf("idle devices %v, want %v", ids, want)
	}
	if snap.Load[g.Run.Suite] != 1 || len(snap.Head) != 1 || snap.Head[0].RunID == g.Run.ID || snap.Truncated {
		t.Errorf("load %v, head %+v (truncated %v): want the claimed run's suite at 1 and the other run queued", snap.Load, snap.Head, snap.Truncated)
	}
	// Only the devices asked for, if idle: pl-0 is busy.
	snap, err = st.Placement(ctx, &store.PlacementParams{DeviceIDs: []string{"pl-0", "pl-2"}, Limit: 100})
	if err != nil || len(snap.Devices) != 1 || snap.Devices[0].ID != "pl-2" || len(snap.Head) != 1 {
		t.Fatalf("freed devices: %+v %v, want pl-2 alone and the queued run", snap, err)
	}
	// The head holds as many runs per suite as devices asked for, plus 16.
	for range 20 {
		if _, _, err := st.CreateRuns(ctx, &store.CreateRunsParams{Spec: smoke(t)}); err != nil {
			t.Fatal(err)
		}
	}
	snap, err = st.Placement(ctx, &store.PlacementParams{DeviceIDs: []string{"pl-1"}, Limit: 100})
	if err != nil || len(snap.Head) != 17 || !snap.Truncated {
		t.Fatalf("head of %d (truncated %v, %v), want 17 of 21 queued", len(snap.Head), snap.Truncated, err)
	}
	// HeadExtra lengthens it (runs reserved by concurrent passes).
	snap2, err := st.Placement(ctx, &store.PlacementParams{DeviceIDs: []string{"pl-1"}, HeadExtra: 3})
	if err != nil || len(snap2.Head) != 20 || !snap2.Truncated {
		t.Fatalf("head with HeadExtra 3: %d (truncated %v, %v), want 20 of 21", len(snap2.Head), snap2.Truncated, err)
	}
	if !slices.IsSortedFunc(snap.Head, func(a, b store.Candidate) int { return a.QueuedAt.Compare(b.QueuedAt) }) {
		t.Error("head not oldest first")
	}
}
