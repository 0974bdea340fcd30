package store_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/store"
)

// TestClaimRunsBatch: one statement grants every pair whose device is idle
// and whose run is queued, each with its own fencing token, and leaves out
// a busy device, a taken run and a run the device refused as unfit.
func TestClaimRunsBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := open(t)
	for _, id := range []string{"b-1", "b-2", "b-3", "b-4", "b-5"} {
		addDevice(t, st, id, nil)
	}
	var runs []int64
	for range 6 {
		_, rs, err := st.CreateRuns(ctx, &store.CreateRunsParams{Spec: smoke(t)})
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, rs[0].ID)
	}
	// b-4 already holds runs[4]; b-5 refused runs[5] as unfit.
	if _, err := st.ClaimRun(ctx, &store.ClaimRunParams{DeviceID: "b-4", RunIDs: []int64{runs[4]}, LeaseTTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	g5, err := st.ClaimRun(ctx, &store.ClaimRunParams{DeviceID: "b-5", RunIDs: []int64{runs[5]}, LeaseTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.ReleaseAssignment(ctx, &store.ReleaseParams{RunID: runs[5], Token: g5.Token, Outcome: "unfit", Refund: true, Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	grants, err := st.ClaimRuns(ctx, &store.ClaimRunsParams{LeaseTTL: time.Minute, Coordinator: "c", Pairs: []store.ClaimPair{
		{"b-1", runs[0]}, {"b-2", runs[1]}, {"b-3", runs[4]}, // runs[4] is taken
		{"b-4", runs[2]}, // b-4 is busy
		{"b-5", runs[5]}, // unfit
	}})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	tokens := map[int64]bool{}
	for _, g := range grants {
		got[g.Run.DeviceID] = g.Run.ID
		if g.Run.State != store.RunAssigned || g.Token == 0 || tokens[g.Token] || g.Job.ID != g.Run.JobID || g.LeaseExpiresAt.IsZero() {
			t.Errorf("grant %+v", g)
		}
		tokens[g.Token] = true
	}
	if len(got) != 2 || got["b-1"] != runs[0] || got["b-2"] != runs[1] {
		t.Fatalf("granted %v, want b-1 and b-2 only", got)
	}
	// The leases are recorded, so the usual lifecycle applies.
	for _, g := range grants {
		if err := st.AckAssignment(ctx, g.Run.ID, g.Token); err != nil {
			t.Fatalf("ack run %d: %v", g.Run.ID, err)
		}
	}
	// The same device twice in one batch is refused as a whole.
	_, err = st.ClaimRuns(ctx, &store.ClaimRunsParams{LeaseTTL: time.Minute, Pairs: []store.ClaimPair{{"b-3", runs[2]}, {"b-3", runs[3]}}})
	if !errors.Is(err, store.ErrBusy) {
		t.Fatalf("device twice: err %v, want ErrBusy", err)
	}
}

// TestConcurrentBatchClaimsNeverDoubleAssign: two "coordinators" batch-
// claim overlapping proposals at once; no run goes to two devices and no
// device gets two runs.
func TestConcurrentBatchClaimsNeverDoubleAssign(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := open(t)
	const devices = 16
	for i := range devices {
		addDevice(t, st, fmt.Sprintf("cb-%02d", i), nil)
	}
	var runs []int64
	for range devices + 4 {
		_, rs, err := st.CreateRuns(ctx, &store.CreateRunsParams{Spec: smoke(t)})
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, rs[0].ID)
	}
	var mu sync.Mutex
	byRun := map[int64]string{}
	byDev := map[string]int64{}
	var wg sync.WaitGroup
	for c := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var pairs []store.ClaimPair
			for i := range devices {
				pairs = append(pairs, store.ClaimPair{DeviceID: fmt.Sprintf("cb-%02d", i), RunID: runs[(i+c)%len(runs)]})
			}
			grants, err := st.ClaimRuns(ctx, &store.ClaimRunsParams{Pairs: pairs, LeaseTTL: time.Minute, Coordinator: fmt.Sprint(c)})
			if err != nil && !errors.Is(err, store.ErrBusy) {
				t.Error(err)
			}
			mu.Lock()
			defer mu.Unlock()
			for _, g := range grants {
				if prev, dup := byRun[g.Run.ID]; dup {
					t.Errorf("run %d granted to %s and %s", g.Run.ID, prev, g.Run.DeviceID)
				}
				if prev, dup := byDev[g.Run.DeviceID]; dup {
					t.Errorf("device %s granted runs %d and %d", g.Run.DeviceID, prev, g.Run.ID)
				}
				byRun[g.Run.ID], byDev[g.Run.DeviceID] = g.Run.DeviceID, g.Run.ID
			}
		}()
	}
	wg.Wait()
	if len(byDev) == 0 {
		t.Fatal("nothing granted")
	}
	var active int
	if err := st.Pool().QueryRow(ctx, `SELECT count(*) FROM runs WHERE state = 'assigned'`).Scan(&active); err != nil || active != len(byRun) {
		t.Fatalf("%d runs assigned in the database (%v), %d grants returned", active, err, len(byRun))
	}
}
