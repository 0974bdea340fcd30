package store_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/internal/testenv"
	"github.com/lesfarm/lesfarm/protocol"
)

// TestTelemetryLockFencesRequeueNotRenewals holds a telemetry transaction
// of two runs open between its token check and its commit. Meanwhile run
// A's lease renewal, its ack and its device's heartbeat, and run B's
// successful result, must go through (they used to wait behind the
// telemetry's FOR SHARE lock), while a requeue of run A
// must wait for the commit and then delete the samples it stored: a stale
// attempt's samples never survive its requeue.
func TestTelemetryLockFencesRequeueNotRenewals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := open(t)
	addDevice(t, st, "dev-a", nil)
	addDevice(t, st, "dev-b", nil)
	spec := smoke(t)
	spec.Retry.MaxAttempts = 3
	for range 2 {
		if _, _, err := st.CreateRuns(ctx, &store.CreateRunsParams{Spec: spec}); err != nil {
			t.Fatal(err)
		}
	}
	g := claim(t, st, "dev-a")
	gb := claim(t, st, "dev-b")
	held, release := make(chan struct{}), make(chan struct{})
	st.SetTelemetryHeld(func() {
		close(held)
		<-release
	})
	b := &protocol.TelemetryBatch{RunID: g.Run.ID, Token: g.Token, DeviceID: "dev-a", Samples: []protocol.Sample{{Phase: "decode", Tokens: 1}}}
	bb := &protocol.TelemetryBatch{RunID: gb.Run.ID, Token: gb.Token, DeviceID: "dev-b", Samples: []protocol.Sample{{Phase: "decode", Tokens: 1}}}
	type insertResult struct {
		st  *store.TelemetryStats
		err error
	}
	inserted := make(chan insertResult, 1)
	go func() {
		ts, err := st.InsertTelemetry(ctx, []*protocol.TelemetryBatch{b, bb})
		inserted <- insertResult{ts, err}
	}()
	<-held
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()

	// Renewals do not wait for the telemetry transaction.
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := st.TouchDevice(rctx, "dev-a", 15*time.Second, "t"); err != nil {
		t.Fatalf("heartbeat waited for or failed behind telemetry: %v", err)
	}
	if err := st.AckAssignment(rctx, g.Run.ID, g.Token); err != nil {
		t.Fatalf("ack waited for or failed behind telemetry: %v", err)
	}
	renewed, cancels, err := st.RenewLeases(rctx, &store.RenewLeasesParams{DeviceID: "dev-a", TTL: 15 * time.Second,
		Runs: []protocol.RunStatus{{RunID: g.Run.ID, Token: g.Token, State: "running", Progress: 0.5}}})
	if err != nil || len(renewed) != 1 || len(cancels) != 0 {
		t.Fatalf("lease renewal behind telemetry: %v renewed=%v cancels=%v", err, renewed, cancels)
	}
	if r, err := st.CompleteRun(rctx, &protocol.Result{RunID: gb.Run.ID, Token: gb.Token, DeviceID: "dev-b", Outcome: "succeeded"}); err != nil || r.State != store.RunSucceeded {
		t.Fatalf("result waited for or failed behind telemetry: %v", err)
	}

	// A requeue waits for the telemetry commit.
	requeued := make(chan error, 1)
	go func() {
		requeued <- st.ReleaseAssignment(ctx, &store.ReleaseParams{RunID: g.Run.ID, Token: g.Token, Reason: "test requeue", Outcome: "refused"})
	}()
	testenv.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		select {
		case err := <-requeued:
			return fmt.Errorf("requeue did not wait for the telemetry transaction (err %v)", err)
		default:
		}
		var waiting int
		err := st.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
			AND wait_event_type = 'Lock' AND query LIKE '%attempts < max_attempts FROM runs%'`).Scan(&waiting)
		if err == nil && waiting == 0 {
			err = errors.New("the requeue is not waiting on a lock yet")
		}
		return err
	})
	close(release)
	if r := <-inserted; r.err != nil || r.st.Inserted != 2 || len(r.st.Stale) != 0 {
		t.Fatalf("telemetry: %+v %v", r.st, r.err)
	}
	if err := <-requeued; err != nil {
		t.Fatalf("requeue: %v", err)
	}
	st.SetTelemetryHeld(nil)
	if r, _ := st.GetRun(ctx, g.Run.ID); r.State != store.RunQueued {
		t.Fatalf("run after requeue: %s", r.State)
	}
	if n, err := st.CountSamples(ctx, g.Run.ID); err != nil || n != 0 {
		t.Fatalf("samples of the requeued attempt kept: %d %v", n, err)
	}
	if n, err := st.CountSamples(ctx, gb.Run.ID); err != nil || n != 1 {
		t.Fatalf("samples of the succeeded run: %d %v", n, err)
	}
	// And the stale attempt's next batch is fenced out.
	b2 := *b
	b2.Seq = 1
	if ts, err := st.InsertTelemetry(ctx, []*protocol.TelemetryBatch{&b2}); err != nil || len(ts.Stale) != 1 {
		t.Fatalf("late telemetry of the requeued attempt: %+v %v", ts, err)
	}
}
