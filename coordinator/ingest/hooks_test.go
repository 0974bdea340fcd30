package ingest_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/ingest"
	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/jobs"
	"github.com/lesfarm/lesfarm/protocol"
)

// stuckReporter counts commits and holds every Finished until release is
// closed.
type stuckReporter struct {
	ingest.BaseReporter
	commits, hooks atomic.Int32
	release        chan struct{}
}

func (r *stuckReporter) Committed(context.Context, *store.Run) { r.commits.Add(1) }

func (r *stuckReporter) Finished(context.Context, *store.Run) {
	<-r.release
	r.hooks.Add(1)
}

// TestSlowHooksDoNotHoldResults: while every Reporter.Finished is stuck, more
// results than the old bound on unacknowledged results (256) are still
// committed, each one once (the waiting ones are kept in progress past
// AckWait, not redelivered); released, every hook runs and is acknowledged.
// With the hooks' bounded channel (256) and 256 unacknowledged results,
// the commits stopped short of them and their devices stayed busy.
func TestSlowHooksDoNotHoldResults(t *testing.T) {
	ctx := context.Background()
	e := setup(t)
	const n = 300
	grants := claimSmokeRuns(ctx, t, e, "hook", n)
	release := make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	rep := &stuckReporter{BaseReporter: ingest.BaseReporter{Store: e.st}, release: release}
	commits, hooks := &rep.commits, &rep.hooks
	ing, err := ingest.New(ingest.Config{JS: e.js, Store: e.st, AckWait: time.Second, HookWorkers: 1, Reporter: rep})
	if err != nil {
		t.Fatal(err)
	}
	if err := ing.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer ing.Stop()
	defer unblock() // before Stop, which waits for the hooks
	for _, g := range grants {
		publish(t, e, protocol.DeviceResultSubject(g.Run.DeviceID, g.Run.ID), &protocol.Result{RunID: g.Run.ID, Token: g.Token, DeviceID: g.Run.DeviceID,
			Outcome: protocol.OutcomeSucceeded, StartedAt: time.Now(), FinishedAt: time.Now()})
	}
	waitFor(t, "every result committed while the hooks are stuck", 60*time.Second, func() bool { return commits.Load() >= n })
	// Past AckWait twice: the waiting results were kept in progress, so
	// none came back (a redelivery reports Committed again). No event marks
	// a redelivery that did not happen: the guarantee is about a span
	// longer than AckWait, so the test watches that span.
	deadline := time.Now().Add(2500 * time.Millisecond)
	for time.Now().Before(deadline) {
		if c := commits.Load(); c != n {
			t.Fatalf("%d commits, want %d: results waiting for their hook were redelivered", c, n)
		}
		time.Sleep(100 * time.Millisecond)
	}
	unblock()
	waitFor(t, "every hook", 60*time.Second, func() bool { return hooks.Load() == n })
	if st := ing.Stats(); st.Results != n {
		t.Fatalf("results %d, want %d", st.Results, n)
	}
	if c := commits.Load(); c != n {
		t.Fatalf("%d commits, want %d", c, n)
	}
}

// claimSmokeRuns registers n devices named PREFIX-dev-NNN and claims one
// run of the smoke suite for each, returning their grants.
func claimSmokeRuns(ctx context.Context, t *testing.T, e *env, prefix string, n int) []*store.Grant {
	t.Helper()
	ram := int64(8 << 30)
	spec, _ := jobs.Builtin("smoke")
	var grants []*store.Grant
	for i := range n {
		id := fmt.Sprintf("%s-dev-%03d", prefix, i)
		if _, err := e.st.UpsertDevice(ctx, &store.UpsertDeviceParams{ID: id, TTL: time.Minute, Fingerprint: protocol.Fingerprint{Platform: "linux", RAMBytes: &ram}}); err != nil {
			t.Fatal(err)
		}
		_, runs, err := e.st.CreateRuns(ctx, &store.CreateRunsParams{Spec: spec})
		if err != nil {
			t.Fatal(err)
		}
		g, err := e.st.ClaimRun(ctx, &store.ClaimRunParams{DeviceID: id, RunIDs: []int64{runs[0].ID}, LeaseTTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		grants = append(grants, g)
	}
	return grants
}
