package store_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/protocol"
)

// TestCompleteRunsFreed: a batch of results commits and returns the
// placement snapshot of the devices it freed (not a stale result's
// device), read inside its transaction; the store places nothing itself.
// Claims made from that snapshot are decided by ClaimRuns' locks and
// conditions: after another coordinator placed a freed device and took a
// queued run between the snapshot and the claim, the stale proposals are
// refused (no device gets two active runs, no run two devices), and a
// proposal still valid is granted with a fresh fencing token and lease.
func TestCompleteRunsFreed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := open(t)
	var grants []*store.Grant
	for _, dev := range []string{"dev-a", "dev-b", "dev-c"} {
		addDevice(t, st, dev, nil)
		if _, _, err := st.CreateRuns(ctx, &store.CreateRunsParams{Spec: smoke(t)}); err != nil {
			t.Fatal(err)
		}
		grants = append(grants, claim(t, st, dev))
	}
	var queued []int64
	for range 3 {
		_, runs, err := st.CreateRuns(ctx, &store.CreateRunsParams{Spec: smoke(t)})
		if err != nil {
			t.Fatal(err)
		}
		queued = append(queued, runs[0].ID)
	}
	res := func(g *store.Grant) *protocol.Result {
		return &protocol.Result{RunID: g.Run.ID, Token: g.Token, DeviceID: g.Run.DeviceID, Outcome: protocol.OutcomeSucceeded}
	}
	stale := res(grants[2])
	stale.Token++
	fr, err := st.CompleteRunsFreed(ctx, []*protocol.Result{res(grants[0]), res(grants[1]), stale}, &store.FreedParams{})
	if err != nil {
		t.Fatal(err)
	}
	if fr.ReadErr != nil {
		t.Fatalf("placement read: %v", fr.ReadErr)
	}
	for i, w := range []error{nil, nil, store.ErrStaleToken} {
		if !errors.Is(fr.Outcomes[i].Err, w) {
			t.Fatalf("outcome %d: %v, want %v", i, fr.Outcomes[i].Err, w)
		}
	}
	if len(fr.Snapshots) != 1 {
		t.Fatalf("%d snapshots, want one for the batch's transaction", len(fr.Snapshots))
	}
	snap := fr.Snapshots[0]
	var offered []string
	for _, d := range snap.Devices {
		offered = append(offered, d.ID)
	}
	slices.Sort(offered)
	var head []int64
	for _, c := range snap.Head {
		head = append(head, c.RunID)
	}
	if !slices.Equal(offered, []string{"dev-a", "dev-b"}) || !slices.Equal(head, queued) {
		t.Fatalf("snapshot devices %v, head %v: want dev-a and dev-b (not the stale result's device), head %v", offered, head, queued)
	}
	active := func(dev string) int {
		var n int
		if err := st.Pool().QueryRow(ctx, `SELECT count(*) FROM runs WHERE device_id = $1 AND state IN ('assigned', 'running')`, dev).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if a, b := active("dev-a"), active("dev-b"); a != 0 || b != 0 {
		t.Fatalf("the store placed freed devices itself: dev-a %d, dev-b %d active runs", a, b)
	}

	// Another coordinator places dev-a with queued[0] after the snapshot.
	other, err := st.ClaimRuns(ctx, &store.ClaimRunsParams{Pairs: []store.ClaimPair{{DeviceID: "dev-a", RunID: queued[0]}}, LeaseTTL: 30e9, Coordinator: "other"})
	if err != nil || len(other) != 1 {
		t.Fatalf("the other coordinator's claim: %d grants, %v", len(other), err)
	}
	for _, tc := range []struct {
		name  string
		pairs []store.ClaimPair
		want  map[string]int64 // device → run granted
	}{
		{"stale: dev-a busy, queued[0] taken", []store.ClaimPair{{DeviceID: "dev-a", RunID: queued[1]}, {DeviceID: "dev-b", RunID: queued[0]}}, map[string]int64{}},
		{"dev-b with a run still queued", []store.ClaimPair{{DeviceID: "dev-b", RunID: queued[1]}}, map[string]int64{"dev-b": queued[1]}},
		{"dev-b again: now busy", []store.ClaimPair{{DeviceID: "dev-b", RunID: queued[2]}}, map[string]int64{}},
	} {
		got, err := st.ClaimRuns(ctx, &store.ClaimRunsParams{Pairs: tc.pairs, LeaseTTL: 30e9, Coordinator: "t"})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if len(got) != len(tc.want) {
			t.Fatalf("%s: %d grants %+v, want %v", tc.name, len(got), got, tc.want)
		}
		for _, g := range got {
			if tc.want[g.Run.DeviceID] != g.Run.ID || g.Token <= other[0].Token {
				t.Fatalf("%s: grant %+v", tc.name, g)
			}
			var lease int
			if err := st.Pool().QueryRow(ctx, `SELECT count(*) FROM leases WHERE token = $1 AND device_id = $2 AND released_at IS NULL`,
				g.Token, g.Run.DeviceID).Scan(&lease); err != nil || lease != 1 {
				t.Fatalf("%s: lease of grant %d: %d rows, err %v", tc.name, g.Token, lease, err)
			}
		}
	}
	if a, b := active("dev-a"), active("dev-b"); a != 1 || b != 1 {
		t.Fatalf("active runs: dev-a %d, dev-b %d; want one each", a, b)
	}
	for i, want := range []string{store.RunAssigned, store.RunAssigned, store.RunQueued} {
		if r, err := st.GetRun(ctx, queued[i]); err != nil || r.State != want {
			t.Fatalf("queued[%d]: %+v, %v; want %s", i, r, err, want)
		}
	}
}
