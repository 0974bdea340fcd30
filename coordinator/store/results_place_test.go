package store_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/protocol"
)

// TestBeginCompleteRuns: a batch of results is written in a transaction
// left open with the placement snapshot of the devices it freed (not a
// stale result's device); the store places nothing itself. Until the
// commit, another coordinator can take neither a freed device (it still
// looks busy) nor a run claimed in the transaction (locked); the claim's
// grants commit with the results, each with a fresh fencing token and
// lease. A claim the database refuses (two runs for one device) is rolled
// back to its savepoint and the results still commit; a later claim in
// the same transaction still works. A rolled-back ResultsTx writes
// nothing, and a run's repeated result is settled after the commit.
func TestBeginCompleteRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := open(t)
	var grants []*store.Grant
	for _, dev := range []string{"dev-a", "dev-b", "dev-c", "dev-d"} {
		addDevice(t, st, dev, nil)
		if _, _, err := st.CreateRuns(ctx, &store.CreateRunsParams{Spec: smoke(t)}); err != nil {
			t.Fatal(err)
		}
		grants = append(grants, claim(t, st, dev))
	}
	addDevice(t, st, "dev-idle", nil)
	queue := func(n int) []int64 {
		var ids []int64
		for range n {
			_, runs, err := st.CreateRuns(ctx, &store.CreateRunsParams{Spec: smoke(t)})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, runs[0].ID)
		}
		return ids
	}
	queued := queue(3)
	res := func(g *store.Grant) *protocol.Result {
		return &protocol.Result{RunID: g.Run.ID, Token: g.Token, DeviceID: g.Run.DeviceID, Outcome: protocol.OutcomeSucceeded}
	}
	state := func(id int64) string {
		r, err := st.GetRun(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return r.State
	}
	active := func(dev string) int {
		var n int
		if err := st.Pool().QueryRow(ctx, `SELECT count(*) FROM runs WHERE device_id = $1 AND state IN ('assigned', 'running')`, dev).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	otherClaim := func(dev string, run int64) int {
		g, err := st.ClaimRuns(ctx, &store.ClaimRunsParams{Pairs: []store.ClaimPair{{DeviceID: dev, RunID: run}}, LeaseTTL: 30e9, Coordinator: "other"})
		if err != nil {
			t.Fatalf("the other coordinator's claim of %d for %s: %v", run, dev, err)
		}
		return len(g)
	}
	claimParams := func(pairs ...store.ClaimPair) *store.ClaimRunsParams {
		return &store.ClaimRunsParams{Pairs: pairs, LeaseTTL: 30e9, Coordinator: "t"}
	}

	stale := res(grants[2])
	stale.Token++
	rt, err := st.BeginCompleteRuns(ctx, []*protocol.Result{res(grants[0]), res(grants[1]), stale}, &store.FreedParams{})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Rollback(ctx)
	if rt.ReadErr != nil || rt.Snapshot == nil {
		t.Fatalf("placement read: %v, snapshot %v", rt.ReadErr, rt.Snapshot)
	}
	var offered []string
	for _, d := range rt.Snapshot.Devices {
		offered = append(offered, d.ID)
	}
	slices.Sort(offered)
	var head []int64
	for _, c := range rt.Snapshot.Head {
		head = append(head, c.RunID)
	}
	if !slices.Equal(offered, []string{"dev-a", "dev-b"}) || !slices.Equal(head, queued) {
		t.Fatalf("snapshot devices %v, head %v: want dev-a and dev-b (not the stale result's device), head %v", offered, head, queued)
	}
	if a, b := active("dev-a"), active("dev-b"); a != 1 || b != 1 {
		t.Fatalf("before the commit others see dev-a %d, dev-b %d active runs; want their results' runs", a, b)
	}
	// Before the commit another coordinator cannot take a freed device.
	if n := otherClaim("dev-a", queued[2]); n != 0 {
		t.Fatal("another coordinator placed dev-a between its result and the commit")
	}
	// The pair for dev-c is refused by the claim's rules (its run is
	// active), not an error.
	if err := rt.Claim(ctx, claimParams(store.ClaimPair{DeviceID: "dev-a", RunID: queued[0]}, store.ClaimPair{DeviceID: "dev-b", RunID: queued[1]},
		store.ClaimPair{DeviceID: "dev-c", RunID: queued[2]})); err != nil {
		t.Fatal(err)
	}
	// The claimed runs are locked: another coordinator skips them.
	if n := otherClaim("dev-idle", queued[0]); n != 0 {
		t.Fatal("another coordinator took a run claimed in the open transaction")
	}
	done, err := rt.Commit(ctx)
	if err != nil || done.GrantErr != nil {
		t.Fatalf("commit: %v, grants: %v", err, done.GrantErr)
	}
	for i, w := range []error{nil, nil, store.ErrStaleToken} {
		if !errors.Is(done.Outcomes[i].Err, w) {
			t.Fatalf("outcome %d: %v, want %v", i, done.Outcomes[i].Err, w)
		}
	}
	if len(done.Grants) != 2 {
		t.Fatalf("grants %+v: want dev-a's and dev-b's", done.Grants)
	}
	for _, g := range done.Grants {
		want := map[string]int64{"dev-a": queued[0], "dev-b": queued[1]}[g.Run.DeviceID]
		if g.Run.ID != want || g.Run.State != store.RunAssigned || g.Token <= grants[3].Token || g.Job.ID == 0 {
			t.Fatalf("grant %+v", g)
		}
		var lease int
		if err := st.Pool().QueryRow(ctx, `SELECT count(*) FROM leases WHERE token = $1 AND device_id = $2 AND released_at IS NULL`,
			g.Token, g.Run.DeviceID).Scan(&lease); err != nil || lease != 1 {
			t.Fatalf("lease of grant %d: %d rows, err %v", g.Token, lease, err)
		}
	}
	if s0, s1 := state(grants[0].Run.ID), state(grants[1].Run.ID); s0 != store.RunSucceeded || s1 != store.RunSucceeded {
		t.Fatalf("results' runs %s, %s after the commit", s0, s1)
	}
	if a, b, c := active("dev-a"), active("dev-b"), active("dev-c"); a != 1 || b != 1 || c != 1 {
		t.Fatalf("active runs: dev-a %d, dev-b %d, dev-c %d; want one each", a, b, c)
	}

	// Rolled back: nothing written, dev-c's run still active.
	rt, err = st.BeginCompleteRuns(ctx, []*protocol.Result{res(grants[2])}, &store.FreedParams{})
	if err != nil {
		t.Fatal(err)
	}
	rt.Rollback(ctx)
	if s := state(grants[2].Run.ID); s != store.RunRunning && s != store.RunAssigned {
		t.Fatalf("a rolled-back result left its run %s", s)
	}
	if _, err := rt.Commit(ctx); err == nil {
		t.Fatal("Commit after Rollback succeeded")
	}

	// dev-c's result, with two runs proposed for it: the partial unique
	// index refuses the claim, the savepoint keeps the results, and a
	// claim after it in the same transaction is granted. dev-d's result
	// is listed twice: the repeat is settled after the commit.
	more := queue(2)
	rt, err = st.BeginCompleteRuns(ctx, []*protocol.Result{res(grants[2]), res(grants[3]), res(grants[3])}, &store.FreedParams{})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Rollback(ctx)
	err = rt.Claim(ctx, claimParams(store.ClaimPair{DeviceID: "dev-c", RunID: queued[2]}, store.ClaimPair{DeviceID: "dev-c", RunID: more[0]}))
	if !errors.Is(err, store.ErrBusy) {
		t.Fatalf("two runs for one device: %v, want ErrBusy", err)
	}
	if err := rt.Claim(ctx, claimParams(store.ClaimPair{DeviceID: "dev-d", RunID: more[1]})); err != nil {
		t.Fatalf("claim after a refused one: %v", err)
	}
	done, err = rt.Commit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i, w := range []error{nil, nil, store.ErrAlreadyCompleted} {
		if !errors.Is(done.Outcomes[i].Err, w) {
			t.Fatalf("outcome %d after the refused claim: %v, want %v", i, done.Outcomes[i].Err, w)
		}
	}
	if s := state(grants[2].Run.ID); s != store.RunSucceeded {
		t.Fatalf("dev-c's result after the refused claim: run %s", s)
	}
	if len(done.Grants) != 1 || done.Grants[0].Run.ID != more[1] || done.Grants[0].Run.DeviceID != "dev-d" {
		t.Fatalf("grants %+v: want more[1] for dev-d", done.Grants)
	}
	if c, q2, q3 := active("dev-c"), state(queued[2]), state(more[0]); c != 0 || q2 != store.RunQueued || q3 != store.RunQueued {
		t.Fatalf("after the refused claim dev-c has %d active runs, runs %s, %s", c, q2, q3)
	}
}
