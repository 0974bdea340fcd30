package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/internal/testenv"
	"github.com/lesfarm/lesfarm/protocol"
)

// TestDeferredRunNotices checks that the trigger, claim, result, release,
// lease expiry, timeout, lost-device, agent-restarted and cancel paths,
// whose transactions skip the notify trigger, still announce each change
// after their commit, and that the trigger skips exactly the transactions
// that defer (manual SQL still notifies).
func TestDeferredRunNotices(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := open(t)
	l := startListener(t, st)
	notices := make(chan store.RunNotice, 64)
	l.OnNotice(func(n store.RunNotice) {
		if n.RunID != 0 {
			notices <- n
		}
	})
	next := func(what string) store.RunNotice {
		t.Helper()
		select {
		case n := <-notices:
			return n
		case <-time.After(10 * time.Second):
			t.Fatalf("no notice for %s", what)
			return store.RunNotice{}
		}
	}
	expect := func(what string, id int64, state string) {
		t.Helper()
		if n := next(what); n.RunID != id || n.State != state {
			t.Fatalf("%s: notice %+v, want run %d %s", what, n, id, state)
		}
	}
	addDevice(t, st, "dev-a", nil)
	tr, runs, err := st.CreateRuns(ctx, &store.CreateRunsParams{Spec: smoke(t)})
	if err != nil {
		t.Fatal(err)
	}
	if n := next("trigger"); n.RunID != runs[0].ID || n.State != store.RunQueued || n.TriggerID != tr.ID {
		t.Fatalf("trigger: notice %+v, want run %d queued of trigger %d", n, runs[0].ID, tr.ID)
	}
	grants, err := st.ClaimRuns(ctx, &store.ClaimRunsParams{Pairs: []store.ClaimPair{{DeviceID: "dev-a", RunID: runs[0].ID}}, LeaseTTL: time.Minute, Coordinator: "t"})
	if err != nil || len(grants) != 1 {
		t.Fatalf("claim: %v %v", grants, err)
	}
	expect("claim", runs[0].ID, store.RunAssigned)
	g := grants[0]
	if _, err := st.CompleteRun(ctx, &protocol.Result{RunID: g.Run.ID, Token: g.Token, DeviceID: "dev-a", Outcome: "succeeded"}); err != nil {
		t.Fatal(err)
	}
	expect("result", runs[0].ID, store.RunSucceeded)
	// An assignment released unacknowledged: requeued, announced.
	_, rel, err := st.CreateRuns(ctx, &store.CreateRunsParams{Spec: smoke(t)})
	if err != nil {
		t.Fatal(err)
	}
	expect("third trigger", rel[0].ID, store.RunQueued)
	if grants, err = st.ClaimRuns(ctx, &store.ClaimRunsParams{Pairs: []store.ClaimPair{{DeviceID: "dev-a", RunID: rel[0].ID}}, LeaseTTL: time.Minute, Coordinator: "t"}); err != nil || len(grants) != 1 {
		t.Fatalf("claim: %v %v", grants, err)
	}
	expect("second claim", rel[0].ID, store.RunAssigned)
	if err := st.ReleaseAssignment(ctx, &store.ReleaseParams{RunID: rel[0].ID, Token: grants[0].Token, Reason: "no ack", Outcome: "unreachable", Refund: true}); err != nil {
		t.Fatal(err)
	}
	expect("release", rel[0].ID, store.RunQueued)

	// The requeue and end paths (lease expiry, run timeout, lost device,
	// agent restarted, cancel) defer too: one notice each, after the
	// commit (a trigger notice as well would come first, twice).
	grantOn := func(dev string, ttl time.Duration) *store.Grant {
		t.Helper()
		addDevice(t, st, dev, nil)
		_, rs, err := st.CreateRuns(ctx, &store.CreateRunsParams{Spec: smoke(t)})
		if err != nil {
			t.Fatal(err)
		}
		expect("trigger on "+dev, rs[0].ID, store.RunQueued)
		gs, err := st.ClaimRuns(ctx, &store.ClaimRunsParams{Pairs: []store.ClaimPair{{DeviceID: dev, RunID: rs[0].ID}}, LeaseTTL: ttl, Coordinator: "t"})
		if err != nil || len(gs) != 1 {
			t.Fatalf("claim on %s: %v %v", dev, gs, err)
		}
		expect("claim on "+dev, rs[0].ID, store.RunAssigned)
		return &gs[0]
	}
	exp := grantOn("dev-expire", time.Millisecond)
	testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		lost, err := st.ExpireLeases(ctx, 10)
		if err == nil && len(lost) == 0 {
			err = errors.New("lease not expired yet")
		}
		return err
	})
	expect("lease expired", exp.Run.ID, store.RunQueued)

	to := grantOn("dev-timeout", time.Minute)
	if _, err := st.Pool().Exec(ctx, `UPDATE runs SET deadline_at = now() - interval '1 second' WHERE id = $1`, to.Run.ID); err != nil {
		t.Fatal(err)
	}
	timedOut, err := st.TimeoutRuns(ctx, 10)
	if err != nil || len(timedOut) != 1 {
		t.Fatalf("timeout: %v %v", timedOut, err)
	}
	want := store.RunFailed
	if timedOut[0].Requeued {
		want = store.RunQueued
	}
	expect("run timed out", to.Run.ID, want)

	lostRun := grantOn("dev-lost", time.Minute)
	if _, err := st.Pool().Exec(ctx, `UPDATE devices SET last_seen_at = now() - interval '1 hour' WHERE id = 'dev-lost'`); err != nil {
		t.Fatal(err)
	}
	if lost, _, err := st.MarkDeviceLost(ctx, "dev-lost", 0); err != nil || !lost {
		t.Fatalf("mark lost: %v %v", lost, err)
	}
	expect("device lost", lostRun.Run.ID, store.RunQueued)

	rs := grantOn("dev-restart", time.Minute)
	if err := st.AckAssignment(ctx, rs.Run.ID, rs.Token); err != nil {
		t.Fatal(err)
	}
	expect("ack", rs.Run.ID, store.RunRunning)
	if _, lost, err := st.ReconcileHello(ctx, "dev-restart", nil, time.Minute); err != nil || len(lost) != 1 {
		t.Fatalf("reconcile hello: %v %v", lost, err)
	}
	expect("agent restarted", rs.Run.ID, store.RunQueued)

	if _, err := st.CancelRun(ctx, rs.Run.ID, "test"); err != nil {
		t.Fatal(err)
	}
	expect("cancel", rs.Run.ID, store.RunCancelled)

	// The trigger: silent in a deferring transaction (run B), heard
	// otherwise (run A, updated after it). Notices arrive in commit order,
	// so a notice of B would come first.
	_, other, err := st.CreateRuns(ctx, &store.CreateRunsParams{Spec: smoke(t)})
	if err != nil {
		t.Fatal(err)
	}
	expect("second trigger", other[0].ID, store.RunQueued)
	for _, id := range []int64{other[0].ID, runs[0].ID} {
		tx, err := st.Pool().Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if id == other[0].ID {
			if _, err := tx.Exec(ctx, `SELECT set_config('lesfarm.notify', 'deferred', true)`); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := tx.Exec(ctx, `UPDATE runs SET progress_message = 'manual' WHERE id = $1`, id); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	expect("manual update", runs[0].ID, store.RunSucceeded)
}
