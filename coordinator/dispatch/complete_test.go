package dispatch_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/lesfarm/lesfarm/coordinator/coordinatortest"
	"github.com/lesfarm/lesfarm/coordinator/dispatch"
	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/internal/testenv"
	"github.com/lesfarm/lesfarm/jobs"
	"github.com/lesfarm/lesfarm/protocol"
)

func TestMain(m *testing.M) { os.Exit(testenv.Run(m)) }

// acceptor is a fleet of fake agents that accept every assignment and
// record which device got which run (by token).
type acceptor struct {
	mu  sync.Mutex
	got map[int64]string // run → device
	dup []string         // runs assigned twice
}

func (a *acceptor) listen(t *testing.T, nc *nats.Conn, device string) {
	t.Helper()
	sub, err := nc.Subscribe(protocol.AssignSubject(device), func(m *nats.Msg) {
		runID, token := protocol.PeekAssignment(m.Data)
		a.mu.Lock()
		if prev, ok := a.got[runID]; ok {
			a.dup = append(a.dup, fmt.Sprintf("run %d to %s and %s", runID, prev, device))
		}
		a.got[runID] = device
		a.mu.Unlock()
		data, _ := protocol.Encode(&protocol.AssignReply{RunID: runID, Token: token, Accepted: true})
		_ = m.Respond(data)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
}

// TestCompleteRunsNeverDoubleAssigns: two dispatchers on one database
// commit the results of eight devices at once (four each) while three runs
// are queued. The freed devices are placed from each dispatcher's
// snapshot and claimed by the store, which decides between the two: every
// queued run goes to exactly one freed device, no device holds two active
// runs, and each agent receives the assignment of the run it holds.
func TestCompleteRunsNeverDoubleAssigns(t *testing.T) {
	ctx := context.Background()
	dbURL, ns := testenv.MigratedPostgresURL(t), testenv.NATS(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	var disps []*dispatch.Dispatcher
	var st *store.Store
	var agents *nats.Conn
	for i, name := range []string{"c1", "c2"} {
		s, nc := coordinatortest.Deps(t, name, dbURL, ns.ClientURL())
		key, err := s.SigningKey(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// A long tick: the only placements are CompleteRuns' (and the
		// rounds its results may wake).
		d, err := dispatch.New(dispatch.Config{Store: s, NATS: nc, SigningKey: key, Name: name, HeartbeatTTL: time.Hour,
			Interval: time.Hour, AssignTimeout: 5 * time.Second, ArtifactBaseURL: "http://127.0.0.1:1", Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(d.Stop)
		disps = append(disps, d)
		if i == 0 {
			st, agents = s, nc
		}
	}
	spec, err := jobs.Builtin("smoke")
	if err != nil {
		t.Fatal(err)
	}
	acc := &acceptor{got: map[int64]string{}}
	var results [2][]*protocol.Result
	for i := range 8 {
		dev := fmt.Sprintf("dev-%d", i)
		if _, err := st.UpsertDevice(ctx, &store.UpsertDeviceParams{ID: dev, TTL: time.Hour, Coordinator: "c1"}); err != nil {
			t.Fatal(err)
		}
		_, runs, err := st.CreateRuns(ctx, &store.CreateRunsParams{Spec: spec})
		if err != nil {
			t.Fatal(err)
		}
		g, err := st.ClaimRuns(ctx, &store.ClaimRunsParams{Pairs: []store.ClaimPair{{DeviceID: dev, RunID: runs[0].ID}}, LeaseTTL: time.Hour, Coordinator: "c1"})
		if err != nil || len(g) != 1 {
			t.Fatalf("claim for %s: %d grants, %v", dev, len(g), err)
		}
		acc.listen(t, agents, dev)
		results[i/4] = append(results[i/4], &protocol.Result{RunID: g[0].Run.ID, Token: g[0].Token, DeviceID: dev, Outcome: protocol.OutcomeSucceeded})
	}
	var queued []int64
	for range 3 {
		_, runs, err := st.CreateRuns(ctx, &store.CreateRunsParams{Spec: spec})
		if err != nil {
			t.Fatal(err)
		}
		queued = append(queued, runs[0].ID)
	}
	var wg sync.WaitGroup
	for i, d := range disps {
		wg.Go(func() {
			outs, err := d.CompleteRuns(ctx, results[i])
			if err != nil {
				t.Error(err)
				return
			}
			for k, o := range outs {
				if o.Err != nil || o.Run.State != store.RunSucceeded {
					t.Errorf("dispatcher %d result %d: %+v", i, k, o)
				}
			}
		})
	}
	wg.Wait()
	testenv.Eventually(t, 20*time.Second, 20*time.Millisecond, func() error {
		for _, id := range queued {
			r, err := st.GetRun(ctx, id)
			if err != nil {
				return err
			}
			if r.State != store.RunAssigned && r.State != store.RunRunning {
				return fmt.Errorf("run %d is %s", id, r.State)
			}
			acc.mu.Lock()
			dev := acc.got[id]
			acc.mu.Unlock()
			if dev != r.DeviceID {
				return fmt.Errorf("run %d: held by %s, its agent %q received it", id, r.DeviceID, dev)
			}
		}
		return nil
	})
	var busiest int
	if err := st.Pool().QueryRow(ctx, `SELECT coalesce(max(n), 0) FROM (SELECT count(*) AS n FROM runs
		WHERE state IN ('assigned', 'running') GROUP BY device_id) c`).Scan(&busiest); err != nil {
		t.Fatal(err)
	}
	acc.mu.Lock()
	defer acc.mu.Unlock()
	if busiest != 1 || len(acc.dup) > 0 || len(acc.got) != len(queued) {
		t.Fatalf("a device holds %d active runs; duplicate assignments %v; %d runs assigned, want %d", busiest, acc.dup, len(acc.got), len(queued))
	}
}
