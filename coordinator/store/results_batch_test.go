package store_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/protocol"
)

// TestCompleteRunsBatch commits one batch mixing every kind of result and
// checks that each is fenced on its own: the stale ones write nothing and
// do not stop the others, a repeat of a result in the same batch is
// recognised as already recorded, a retried abort requeues its run.
func TestCompleteRunsBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := open(t)
	var grants []*store.Grant
	for i := range 5 {
		dev := fmt.Sprintf("dev-%d", i)
		addDevice(t, st, dev, nil)
		spec := smoke(t)
		spec.Retry.MaxAttempts = 2
		if _, _, err := st.CreateRuns(ctx, &store.CreateRunsParams{Spec: spec}); err != nil {
			t.Fatal(err)
		}
		grants = append(grants, claim(t, st, dev))
	}
	res := func(i int, outcome string, nconf int) *protocol.Result {
		r := &protocol.Result{RunID: grants[i].Run.ID, Token: grants[i].Token, DeviceID: grants[i].Run.DeviceID, Outcome: outcome}
		for k := range nconf {
			r.Configs = append(r.Configs, protocol.ConfigResult{ConfigIndex: k, ConfigKey: fmt.Sprintf("c%d", k),
				DecodeTPS: protocol.Stat{N: 3, Mean: float64(10 + k)}, Valid: true})
		}
		return r
	}
	ok0 := res(0, protocol.OutcomeSucceeded, 2)
	stale1 := res(1, protocol.OutcomeSucceeded, 1)
	stale1.Token--
	wrongDev2 := res(2, protocol.OutcomeSucceeded, 1)
	wrongDev2.DeviceID = "dev-0"
	abort3 := res(3, protocol.OutcomeAborted, 0)
	fail4 := res(4, protocol.OutcomeFailed, 1)
	fail4.Error = "out of memory"
	unknown := &protocol.Result{RunID: 1 << 40, Token: 1, DeviceID: "dev-0", Outcome: protocol.OutcomeSucceeded}
	batch := []*protocol.Result{ok0, stale1, wrongDev2, abort3, ok0, fail4, unknown}
	outs, err := st.CompleteRuns(ctx, batch)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		err   error
		state string
	}{{nil, store.RunSucceeded}, {store.ErrStaleToken, ""}, {store.ErrStaleToken, ""}, {nil, store.RunQueued},
		{store.ErrAlreadyCompleted, store.RunSucceeded}, {nil, store.RunFailed}, {store.ErrStaleToken, ""}}
	for i, w := range want {
		o := outs[i]
		if !errors.Is(o.Err, w.err) && (w.err != nil || o.Err != nil) {
			t.Errorf("result %d: err %v, want %v", i, o.Err, w.err)
			continue
		}
		if w.state == "" {
			if o.Run != nil {
				t.Errorf("result %d: stale but run %+v", i, o.Run)
			}
			continue
		}
		if o.Run == nil || o.Run.ID != batch[i].RunID || o.Run.State != w.state {
			t.Errorf("result %d: run %+v, want run %d %s", i, o.Run, batch[i].RunID, w.state)
		}
	}
	if outs[5].Run != nil && outs[5].Run.Error != "out of memory" {
		t.Errorf("failed run's error %q", outs[5].Run.Error)
	}
	for i, n := range []int{2, 0, 0, 0, 1} {
		rs, err := st.ListResults(ctx, &store.ListResultsParams{RunID: grants[i].Run.ID, Limit: 10})
		if err != nil || len(rs) != n {
			t.Errorf("run %d: %d results (%v), want %d", i, len(rs), err, n)
		}
		for _, r := range rs {
			if r.DeviceModel != "Pixel 8" || r.DecodeTPS.Mean < 10 {
				t.Errorf("run %d: result %+v", i, r)
			}
		}
	}
	// Devices 0, 3 and 4 are free; 1 and 2 still hold their runs, whose
	// own results then complete them.
	for i, busy := range []bool{false, true, true, false, false} {
		d, err := st.GetDevice(ctx, grants[i].Run.DeviceID)
		if err != nil || (d.ActiveRunID != 0) != busy {
			t.Errorf("device %d: active run %d (%v), busy %v", i, d.ActiveRunID, err, busy)
		}
	}
	stale1.Token++
	wrongDev2.DeviceID = grants[2].Run.DeviceID
	outs, err = st.CompleteRuns(ctx, []*protocol.Result{wrongDev2, stale1})
	if err != nil || outs[0].Err != nil || outs[1].Err != nil || outs[0].Run.State != store.RunSucceeded || outs[1].Run.State != store.RunSucceeded {
		t.Fatalf("the current results of runs 1 and 2: %v %+v", err, outs)
	}
}

// TestAckAssignmentsRenew: one statement acknowledges many assignments;
// a stale token's is refused without touching its run.
func TestAckAssignmentsRenew(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := open(t)
	var gs []*store.Grant
	for i := range 3 {
		dev := fmt.Sprintf("ack-%d", i)
		addDevice(t, st, dev, nil)
		if _, _, err := st.CreateRuns(ctx, &store.CreateRunsParams{Spec: smoke(t)}); err != nil {
			t.Fatal(err)
		}
		gs = append(gs, claim(t, st, dev))
	}
	acked, err := st.AckAssignmentsRenew(ctx, []store.AckRenew{{RunID: gs[2].Run.ID, Token: gs[2].Token}, {RunID: gs[0].Run.ID, Token: gs[0].Token + 100},
		{RunID: gs[1].Run.ID, Token: gs[1].Token}}, time.Hour)
	if err != nil || len(acked) != 3 || !acked[0] || acked[1] || !acked[2] {
		t.Fatalf("acked %v (%v), want [true false true]", acked, err)
	}
	for i, want := range []string{store.RunAssigned, store.RunRunning, store.RunRunning} {
		r, err := st.GetRun(ctx, gs[i].Run.ID)
		if err != nil || r.State != want || (want == store.RunRunning && (r.StartedAt == nil || time.Until(*r.LeaseExpiresAt) < 30*time.Minute)) {
			t.Errorf("run %d: %+v (%v), want %s with its lease renewed", i, r, err, want)
		}
	}
}
