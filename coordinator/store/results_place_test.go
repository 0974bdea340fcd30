package store_test

import (
	"context"
	"errors"
	"testing"

	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/protocol"
)

// TestCompleteRunsPlace: the devices a batch of results frees get their
// next runs in the results' own transaction, each grant with a fresh
// fencing token and lease; a stale result's device is not offered; a
// proposal the claim's rules refuse is left out; and a placement the
// database refuses (two runs proposed for one device) is rolled back while
// the results still commit.
func TestCompleteRunsPlace(t *testing.T) {
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
	queue := func() []int64 {
		var ids []int64
		for range 3 {
			_, runs, err := st.CreateRuns(ctx, &store.CreateRunsParams{Spec: smoke(t)})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, runs[0].ID)
		}
		return ids
	}
	queued := queue()
	res := func(g *store.Grant) *protocol.Result {
		return &protocol.Result{RunID: g.Run.ID, Token: g.Token, DeviceID: g.Run.DeviceID, Outcome: protocol.OutcomeSucceeded}
	}
	stale := res(grants[2])
	stale.Token++
	var offered []string
	pl := &store.PlaceParams{LeaseTTL: 30e9, Coordinator: "t", Pick: func(snap *store.PlacementSnapshot) []store.ClaimPair {
		var pairs []store.ClaimPair
		for i, d := range snap.Devices {
			offered = append(offered, d.ID)
			pairs = append(pairs, store.ClaimPair{DeviceID: d.ID, RunID: snap.Head[i].RunID})
		}
		// A run that is not queued (dev-c's, active) for a device that is
		// not idle: refused by the claim's rules, not an error.
		return append(pairs, store.ClaimPair{DeviceID: "dev-c", RunID: grants[2].Run.ID})
	}}
	pr, err := st.CompleteRunsPlace(ctx, []*protocol.Result{res(grants[0]), res(grants[1]), stale}, pl)
	if err != nil {
		t.Fatal(err)
	}
	if pr.PlaceErr != nil {
		t.Fatalf("placement error: %v", pr.PlaceErr)
	}
	if len(offered) != 2 || offered[0] == "dev-c" || offered[1] == "dev-c" {
		t.Fatalf("offered %v: want dev-a and dev-b, not the stale result's device", offered)
	}
	for i, w := range []error{nil, nil, store.ErrStaleToken} {
		if !errors.Is(pr.Outcomes[i].Err, w) {
			t.Fatalf("outcome %d: %v, want %v", i, pr.Outcomes[i].Err, w)
		}
	}
	if len(pr.Grants) != 2 {
		t.Fatalf("grants %+v: want one for each freed device", pr.Grants)
	}
	for _, g := range pr.Grants {
		if g.Run.State != store.RunAssigned || g.Token <= grants[2].Token || g.Job.ID == 0 || (g.Run.ID != queued[0] && g.Run.ID != queued[1]) {
			t.Fatalf("grant %+v", g)
		}
		var lease int
		if err := st.Pool().QueryRow(ctx, `SELECT count(*) FROM leases WHERE token = $1 AND device_id = $2 AND released_at IS NULL`,
			g.Token, g.Run.DeviceID).Scan(&lease); err != nil || lease != 1 {
			t.Fatalf("lease of grant %d: %d rows, err %v", g.Token, lease, err)
		}
		if r, err := st.GetRun(ctx, g.Run.ID); err != nil || r.State != store.RunAssigned || r.Token != g.Token {
			t.Fatalf("granted run as stored: %+v, %v", r, err)
		}
	}

	// dev-c's result, with two runs proposed for it: the partial unique
	// index refuses the claim, the result commits, nothing is granted.
	pl.Pick = func(snap *store.PlacementSnapshot) []store.ClaimPair {
		return []store.ClaimPair{{DeviceID: "dev-c", RunID: snap.Head[0].RunID}, {DeviceID: "dev-c", RunID: snap.Head[1].RunID}}
	}
	queue()
	pr, err = st.CompleteRunsPlace(ctx, []*protocol.Result{res(grants[2])}, pl)
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(pr.PlaceErr, store.ErrBusy) || len(pr.Grants) != 0 || pr.Outcomes[0].Err != nil || pr.Outcomes[0].Run.State != store.RunSucceeded {
		t.Fatalf("refused placement: err %v, grants %d, outcome %+v", pr.PlaceErr, len(pr.Grants), pr.Outcomes[0])
	}
	if r, err := st.GetRun(ctx, grants[2].Run.ID); err != nil || r.State != store.RunSucceeded {
		t.Fatalf("result after a refused placement: %+v, %v", r, err)
	}
	var active int
	if err := st.Pool().QueryRow(ctx, `SELECT count(*) FROM runs WHERE device_id = 'dev-c' AND state IN ('assigned', 'running')`).Scan(&active); err != nil || active != 0 {
		t.Fatalf("dev-c has %d active runs (err %v) after the refused placement", active, err)
	}
}
