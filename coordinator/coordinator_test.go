package coordinator_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/nats-io/nats-server/v2/server"

	"github.com/lesfarm/lesfarm/coordinator"
	"github.com/lesfarm/lesfarm/coordinator/coordinatortest"
	"github.com/lesfarm/lesfarm/coordinator/ingest"
	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/internal/testenv"
	"github.com/lesfarm/lesfarm/jobs"
	"github.com/lesfarm/lesfarm/protocol"
)

func TestMain(m *testing.M) { os.Exit(testenv.Run(m)) }

func quietLogger() *slog.Logger {
	if os.Getenv("LESFARM_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

type farm struct {
	dbURL   string
	natsURL string
	ns      *server.Server
}

func newFarm(t testing.TB) *farm {
	t.Helper()
	ns := testenv.NATS(t)
	return &farm{dbURL: testenv.MigratedPostgresURL(t), natsURL: ns.ClientURL(), ns: ns}
}

func (f *farm) coordinator(t testing.TB, name string, mod func(*coordinator.Config)) *coordinator.Coordinator {
	t.Helper()
	cfg := coordinator.Config{Name: name, HeartbeatTTL: time.Second,
		LostGrace: 200 * time.Millisecond, SweepInterval: 200 * time.Millisecond, DispatchInterval: 200 * time.Millisecond,
		ArtifactBaseURL: "http://127.0.0.1:1", Logger: quietLogger(), AssignTimeout: 2 * time.Second,
		Ingest: ingest.Config{AckWait: 2 * time.Second, FetchWait: 20 * time.Millisecond}}
	if mod != nil {
		mod(&cfg)
	}
	cfg = coordinatortest.Config(t, cfg, f.dbURL, f.natsURL)
	c, err := coordinator.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	return c
}

func trigger(t testing.TB, st *store.Store, n int, mod func(*jobs.Spec)) []int64 {
	t.Helper()
	spec, err := jobs.Builtin("smoke")
	if err != nil {
		t.Fatal(err)
	}
	if mod != nil {
		mod(spec)
	}
	var ids []int64
	for range n {
		_, runs, err := st.CreateRuns(context.Background(), &store.CreateRunsParams{Spec: spec, Build: "b1", GitSHA: "deadbeef"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, runs[0].ID)
	}
	return ids
}

func waitRun(t testing.TB, st *store.Store, id int64, state string, timeout time.Duration) *store.Run {
	t.Helper()
	var r *store.Run
	testenv.Eventually(t, timeout, 25*time.Millisecond, func() error {
		var err error
		if r, err = st.GetRun(context.Background(), id); err != nil {
			return err
		}
		if r.State != state {
			return fmt.Errorf("run %d: state %s, want %s", id, r.State, state)
		}
		return nil
	})
	return r
}

// TestRunEndToEnd: trigger -> assignment (signed, verified) -> telemetry
// (with duplicates) -> result -> succeeded, every sample exactly once.
func TestRunEndToEnd(t *testing.T) {
	f := newFarm(t)
	c := f.coordinator(t, "c1", nil)
	d := newDriver(t, f.natsURL, "dev-1")
	d.hello(map[string]string{"pool": "ci"})
	ids := trigger(t, c.Store(), 1, nil)
	a := d.waitAssignment(10 * time.Second)
	if a.RunID != ids[0] || a.Token == 0 || a.Suite != "smoke" || len(a.Configs) != 2 || a.Artifact.SHA256 != a.Spec.Model.SHA256 ||
		a.Artifact.URL != "http://127.0.0.1:1/v1/artifacts/"+a.Spec.Model.SHA256 {
		t.Fatalf("assignment %+v", a)
	}
	waitRun(t, c.Store(), a.RunID, store.RunRunning, 5*time.Second)
	const batches, per = 25, 40
	d.telemetry(a, batches, per, 3)
	d.result(a, protocol.OutcomeSucceeded, batches, batches*per)
	r := waitRun(t, c.Store(), a.RunID, store.RunSucceeded, 10*time.Second)
	if r.DeviceID != "dev-1" || r.Attempts != 1 {
		t.Fatalf("run %+v", r)
	}
	// Samples published before the result may still be in flight.
	var keys [][2]int
	testenv.Eventually(t, 10*time.Second, 25*time.Millisecond, func() error {
		var err error
		if keys, err = c.Store().SampleKeys(context.Background(), a.RunID); err != nil {
			return err
		}
		if len(keys) != batches*per {
			return fmt.Errorf("%d samples, want %d", len(keys), batches*per)
		}
		return nil
	})
	for i, k := range keys {
		if k != [2]int{i / per, i % per} {
			t.Fatalf("sample %d key %v", i, k)
		}
	}
	res, err := c.Store().ListResults(context.Background(), &store.ListResultsParams{RunID: a.RunID, Limit: 10})
	if err != nil || len(res) != 2 {
		t.Fatalf("results %v %+v", err, res)
	}
	// The finished run reached regression detection: its results are points
	// of their series.
	testenv.Eventually(t, 10*time.Second, 25*time.Millisecond, func() error {
		var points int
		err := c.Store().Pool().QueryRow(context.Background(), `SELECT count(*) FROM regress_points WHERE run_key = $1`,
			fmt.Sprint(a.RunID)).Scan(&points)
		if err == nil && points == 0 {
			err = fmt.Errorf("no regress points of run %d", a.RunID)
		}
		return err
	})
}

// TestLostDeviceRequeuesAndStaleTokenRejected: the device holding a run
// dies; the run is requeued as an infrastructure failure, completes on
// another device, and the dead device's late reports are rejected.
func TestLostDeviceRequeuesAndStaleTokenRejected(t *testing.T) {
	f := newFarm(t)
	c := f.coordinator(t, "c1", nil)
	d1 := newDriver(t, f.natsURL, "dev-1")
	d1.hello(nil)
	ids := trigger(t, c.Store(), 1, nil)
	a1 := d1.waitAssignment(10 * time.Second)
	d1.telemetry(a1, 3, 10, 0) // partial telemetry of the doomed attempt
	// A late publisher with the old token, on a connection of its own.
	late := newDriver(t, f.natsURL, "dev-1-late")
	d1.die()
	r := waitRun(t, c.Store(), ids[0], store.RunQueued, 10*time.Second)
	// Requeued because the device was declared lost or its lease expired,
	// or (when the dispatcher offered the run to the dead device again
	// before liveness caught up) because nobody answered the assignment.
	if r.Error != "device lost" && r.Error != "lease expired" && !strings.HasPrefix(r.Error, "agent did not acknowledge the assignment") {
		t.Fatalf("requeued with error %q", r.Error)
	}
	testenv.Eventually(t, 5*time.Second, 25*time.Millisecond, func() error {
		dev, err := c.Store().GetDevice(context.Background(), "dev-1")
		if err == nil && dev.State != store.DeviceLost {
			err = fmt.Errorf("device state %s, want lost", dev.State)
		}
		return err
	})
	d2 := newDriver(t, f.natsURL, "dev-2")
	d2.hello(nil)
	a2 := d2.waitAssignment(10 * time.Second)
	if a2.RunID != a1.RunID || a2.Token <= a1.Token || a2.Attempt != 2 {
		t.Fatalf("second assignment %+v (first token %d)", a2, a1.Token)
	}
	// dev-1's late reports: telemetry and a result with the stale token.
	late.id = "dev-1"
	late.telemetry(a1, 2, 10, 0)
	late.result(a1, protocol.OutcomeSucceeded, 2, 20)
	d2.telemetry(a2, 4, 10, 0)
	d2.result(a2, protocol.OutcomeSucceeded, 4, 40)
	r = waitRun(t, c.Store(), a2.RunID, store.RunSucceeded, 10*time.Second)
	if r.DeviceID != "dev-2" || r.Token != a2.Token {
		t.Fatalf("run %+v", r)
	}
	testenv.Eventually(t, 10*time.Second, 25*time.Millisecond, func() error {
		if stale, n := c.IngestStats().Stale, mustCount(t, c, a2.RunID); stale < 3 || n != 40 {
			return fmt.Errorf("stale=%d samples=%d, want >=3 stale and 40 samples", stale, n)
		}
		return nil
	})
	res, _ := c.Store().ListResults(context.Background(), &store.ListResultsParams{RunID: a2.RunID, Limit: 10})
	for _, x := range res {
		if x.DeviceID != "dev-2" {
			t.Fatalf("result from %s stored", x.DeviceID)
		}
	}
}

func mustCount(t testing.TB, c *coordinator.Coordinator, run int64) int64 {
	n, err := c.Store().CountSamples(context.Background(), run)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestCancelReachesAgent: a cancel is pushed to the agent at once, and a
// refused assignment goes back to the queue.
func TestCancelReachesAgent(t *testing.T) {
	f := newFarm(t)
	c := f.coordinator(t, "c1", nil)
	d := newDriver(t, f.natsURL, "dev-1")
	d.hello(nil)
	ids := trigger(t, c.Store(), 1, nil)
	a := d.waitAssignment(10 * time.Second)
	waitRun(t, c.Store(), a.RunID, store.RunRunning, 5*time.Second)
	ctx := context.Background()
	if _, err := c.Store().CancelRun(ctx, ids[0], "no longer needed"); err != nil {
		t.Fatal(err)
	}
	if err := c.CancelRun(ctx, ids[0]); err != nil {
		t.Fatal(err)
	}
	cn := d.waitCancel(5 * time.Second)
	if cn.RunID != a.RunID || cn.Token != a.Token || cn.Reason != "cancelled: no longer needed" {
		t.Fatalf("cancel %+v", cn)
	}
	// A late result of the cancelled run is rejected: ingest counts it
	// stale (the signal that it was processed) and the run stays cancelled.
	stale := c.IngestStats().Stale
	d.result(a, protocol.OutcomeSucceeded, 0, 0)
	testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		if n := c.IngestStats().Stale; n != stale+1 {
			return fmt.Errorf("%d stale messages, want %d (the late result rejected)", n, stale+1)
		}
		return nil
	})
	r, err := c.Store().GetRun(ctx, a.RunID)
	if err != nil {
		t.Fatal(err)
	}
	if r.State != store.RunCancelled {
		t.Fatalf("after the late result: state %s, want cancelled", r.State)
	}
	if res, err := c.Store().ListResults(ctx, &store.ListResultsParams{RunID: a.RunID, Limit: 10}); err != nil || len(res) != 0 {
		t.Fatalf("after the late result: results %+v (%v), want none", res, err)
	}
	// Refusal: the agent refuses (busy); the run is requeued, then accepted.
	d.mu.Lock()
	d.refuse = protocol.RefuseBusy
	d.mu.Unlock()
	spec := func(s *jobs.Spec) { s.Retry.MaxAttempts = 5 }
	ids = trigger(t, c.Store(), 1, spec)
	testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		var err error
		if r, err = c.Store().GetRun(ctx, ids[0]); err != nil {
			return err
		}
		if r.State != store.RunQueued || r.Error != "refused by agent (busy): test refusal" {
			return fmt.Errorf("refused run not requeued: %+v", r)
		}
		return nil
	})
	if r.Attempts != 0 {
		t.Fatalf("a busy refusal consumed an attempt: %+v", r)
	}
	d.mu.Lock()
	d.refuse = ""
	d.mu.Unlock()
	a = d.waitAssignment(10 * time.Second)
	if a.RunID != ids[0] {
		t.Fatalf("got run %d", a.RunID)
	}
}

// TestRunTimeoutCancelsAgent: a run past its timeout fails and the agent
// is told to stop.
func TestRunTimeoutCancelsAgent(t *testing.T) {
	f := newFarm(t)
	c := f.coordinator(t, "c1", nil)
	d := newDriver(t, f.natsURL, "dev-1")
	d.hello(nil)
	ids := trigger(t, c.Store(), 1, func(s *jobs.Spec) { s.Timeout = jobs.Duration(time.Second) })
	a := d.waitAssignment(10 * time.Second)
	cn := d.waitCancel(10 * time.Second)
	if cn.RunID != a.RunID {
		t.Fatalf("cancel %+v", cn)
	}
	r := waitRun(t, c.Store(), ids[0], store.RunFailed, 5*time.Second)
	if r.Error != "timed out after 1s" {
		t.Fatalf("error %q", r.Error)
	}
}

// TestTwoCoordinatorsNeverDoubleAssign runs two coordinators on one
// database and NATS with many devices and runs; every run completes, and
// no run ever holds two leases at once. A run may go to a second device
// only as a failover (its first lease ended: the agent's reply came after
// the assignment timeout, or the device was lost, which happens on a
// loaded machine), and then the first lease had ended before the second
// was granted.
func TestTwoCoordinatorsNeverDoubleAssign(t *testing.T) {
	f := newFarm(t)
	c1 := f.coordinator(t, "c1", nil)
	f.coordinator(t, "c2", nil)
	const devices, runs = 12, 60
	var mu sync.Mutex
	seen := map[int64][]string{}
	var wg sync.WaitGroup
	done := make(chan struct{})
	for i := range devices {
		d := newDriver(t, f.natsURL, fmt.Sprintf("dev-%02d", i))
		d.hello(nil)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case a := <-d.assigned:
					mu.Lock()
					seen[a.RunID] = append(seen[a.RunID], d.id)
					mu.Unlock()
					d.telemetry(a, 1, 5, 0)
					d.result(a, protocol.OutcomeSucceeded, 1, 5)
				case <-done:
					return
				}
			}
		}()
	}
	ids := trigger(t, c1.Store(), runs, nil)
	for _, id := range ids {
		waitRun(t, c1.Store(), id, store.RunSucceeded, 30*time.Second)
	}
	close(done)
	wg.Wait()
	if len(seen) != runs {
		t.Fatalf("%d runs assigned, want %d", len(seen), runs)
	}
	leases := runLeases(t, c1.Store())
	for id, devs := range seen {
		ls := leases[id]
		if len(devs) > len(ls) {
			t.Errorf("run %d reached %v on %d leases: one lease went to two devices", id, devs, len(ls))
		}
		for i := 1; i < len(ls); i++ {
			prev, cur := ls[i-1], ls[i]
			if !prev.ended.Valid || prev.ended.Time.After(cur.granted) {
				t.Errorf("run %d: lease %d (%s, ended %v) still held when lease %d (%s) was granted at %v: granted twice",
					id, prev.token, prev.device, prev.ended, cur.token, cur.device, cur.granted)
			} else {
				t.Logf("run %d failed over from %s (lease %d: %s) to %s", id, prev.device, prev.token, prev.outcome, cur.device)
			}
		}
	}
}

// lease is one row of a run's lease history.
type lease struct {
	token   int64
	device  string
	granted time.Time
	ended   pgtype.Timestamptz
	outcome string
}

// runLeases returns every run's leases in the order they were granted.
func runLeases(t *testing.T, st *store.Store) map[int64][]lease {
	t.Helper()
	rows, err := st.Pool().Query(context.Background(),
		`SELECT run_id, token, device_id, granted_at, released_at, outcome FROM leases ORDER BY run_id, granted_at, token`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[int64][]lease{}
	for rows.Next() {
		var id int64
		var l lease
		if err := rows.Scan(&id, &l.token, &l.device, &l.granted, &l.ended, &l.outcome); err != nil {
			t.Fatal(err)
		}
		out[id] = append(out[id], l)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestIngestCrashRestart stops a coordinator whose ingest fetched telemetry
// but did not commit it, starts another, and checks the exact count.
//
// The telemetry is sent under the assignment's token, so that token must
// stay the run's for the whole test: a batch under a superseded token is
// stale and never stored (the flake this test had, 0 of 600 samples, on a
// loaded host). Two things could supersede it: c1 giving up on an
// assignment whose reply came after AssignTimeout (then it requeues and
// grants the run again under a new token) and the 1 s lease expiring
// while one coordinator stops and the other starts. Neither is under test
// here, so both are given room (AssignTimeout, HeartbeatTTL), and the
// telemetry goes out only once the coordinator has recorded the
// assignment as running under that token.
func TestIngestCrashRestart(t *testing.T) {
	f := newFarm(t)
	crashed := make(chan struct{})
	var once sync.Once
	roomy := func(cfg *coordinator.Config) {
		cfg.AssignTimeout = 30 * time.Second
		cfg.HeartbeatTTL = 30 * time.Second
	}
	c1 := f.coordinator(t, "c1", func(cfg *coordinator.Config) {
		roomy(cfg)
		cfg.Ingest.Workers = 1
		cfg.Ingest.BeforeCommit = func() error {
			once.Do(func() { close(crashed) })
			return fmt.Errorf("crash")
		}
	})
	d := newDriver(t, f.natsURL, "dev-1")
	d.hello(nil)
	trigger(t, c1.Store(), 1, nil)
	a := d.waitAssignment(10 * time.Second)
	current := func(st *store.Store) error {
		r, err := st.GetRun(context.Background(), a.RunID)
		if err != nil {
			return err
		}
		if r.State != store.RunRunning || r.Token != a.Token {
			return fmt.Errorf("run %d is %s under token %d, the assignment's token is %d", r.ID, r.State, r.Token, a.Token)
		}
		return nil
	}
	testenv.Eventually(t, 20*time.Second, 25*time.Millisecond, func() error { return current(c1.Store()) })
	const batches, per = 20, 30
	d.telemetry(a, batches, per, 2)
	<-crashed
	_ = c1.Stop()
	if n := mustCountStore(t, f, a.RunID); n != 0 {
		t.Fatalf("%d samples committed by a crashed ingest", n)
	}
	c2 := f.coordinator(t, "c2", roomy)
	testenv.Eventually(t, 20*time.Second, 50*time.Millisecond, func() error {
		if n := mustCount(t, c2, a.RunID); n != batches*per {
			return fmt.Errorf("%d samples after restart, want %d (%v)", n, batches*per, current(c2.Store()))
		}
		return nil
	})
	testenv.WaitAcked(t, f.ns, 20*time.Second) // nothing left to redeliver twice
	if n := mustCount(t, c2, a.RunID); n != batches*per {
		t.Fatalf("%d samples, want %d", n, batches*per)
	}
}

func mustCountStore(t testing.TB, f *farm, run int64) int64 {
	t.Helper()
	st, err := store.Open(context.Background(), f.dbURL, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	n, err := st.CountSamples(context.Background(), run)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
