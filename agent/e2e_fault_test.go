package agent

import (
	"context"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/coordinator"
	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/internal/testenv"
)

// TestE2EFinishedWhileDisconnected: the agent's link to NATS is cut while
// it runs, the coordinator is stopped and a new one started on the same
// database (a crash and restart, well inside the lease TTL), and the
// agent finishes the run offline, buffering its result. When the link
// comes back the agent's hello must keep the finished run's lease, so the
// buffered result is accepted: one attempt, the first token, every sample
// of that attempt and its results.
func TestE2EFinishedWhileDisconnected(t *testing.T) {
	// A TTL long enough that the agent is not cut off while it finishes.
	f := newE2EFarmWith(t, e2eDeps{}, coordinator.Config{HeartbeatTTL: 10 * time.Second})
	u, err := url.Parse(f.url)
	if err != nil {
		t.Fatal(err)
	}
	proxy := startFaultProxy(t, u.Host)
	ra := startAgent(t, Config{NATSURL: proxy.url(), Name: "e2e-off"})
	spec := f.spec.Clone()
	spec.Retry.MaxAttempts = 2
	_, runs, err := f.c.Store().CreateRuns(context.Background(), &store.CreateRunsParams{Spec: spec, Build: "e2e", Fanout: true, Source: "test"})
	if err != nil || len(runs) != 1 {
		t.Fatalf("runs %v err %v", runs, err)
	}
	id := runs[0].ID
	first := f.waitRun(t, id, store.RunRunning, 2*time.Minute)
	waitFor(t, time.Minute, "agent running the run", func() bool { return ra.a.Status().RunState == "running" })

	proxy.cut()
	if err := f.c.Stop(); err != nil {
		t.Logf("coordinator stop: %v", err)
	}
	waitFor(t, 2*time.Minute, "agent finishes the run offline", func() bool { return ra.a.Status().RunsDone == 1 })
	if st := ra.a.Status(); st.Connected || st.Buffered == 0 {
		t.Fatalf("agent status %+v: want disconnected with the result buffered", st)
	}
	// The outage outlasted the TTL: the lease and the device's last
	// heartbeat look expired to the new coordinator. They expired only
	// because no coordinator was there to renew them, so it must give the
	// agent a TTL to come back before failing the run over.
	db, err := store.Open(context.Background(), f.dbURL, store.Config{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Pool().Exec(context.Background(), `UPDATE runs SET lease_expires_at = now() - interval '1 second' WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool().Exec(context.Background(), `UPDATE devices SET last_seen_at = now() - interval '1 minute' WHERE id = 'e2e-off'`); err != nil {
		t.Fatal(err)
	}
	f.c = startCoordinator(t, f.cfg)
	// Two sweeps of the new coordinator while the agent is still away.
	waitFor(t, 10*time.Second, "two sweeps", func() bool { return f.c.Sweeps() >= 2 })
	proxy.restore()

	done := f.waitRun(t, id, store.RunSucceeded, time.Minute)
	if done.Attempts != 1 || done.Token != first.Token {
		t.Fatalf("run %d: attempts %d token %d, want 1 attempt under the first token %d (error %q)", id, done.Attempts, done.Token, first.Token, done.Error)
	}
	res, err := f.c.Store().ListResults(context.Background(), &store.ListResultsParams{RunID: id, Limit: 10})
	if err != nil || len(res) != len(spec.Expand()) {
		t.Fatalf("results %d err %v, want %d", len(res), err, len(spec.Expand()))
	}
	want := expectedSamples(spec)
	waitFor(t, 30*time.Second, "every sample ingested", func() bool {
		n, err := f.c.Store().CountSamples(context.Background(), id)
		return err == nil && n == want
	})
	// The finished run is settled: the agent stops listing it.
	waitFor(t, 30*time.Second, "agent forgets the settled run", func() bool {
		ra.a.mu.Lock()
		defer ra.a.mu.Unlock()
		return len(ra.a.unreported) == 0
	})
	if proxy.forwarded() < 2 {
		t.Fatalf("the agent reconnected %d times, want a new connection after the cut", proxy.forwarded()-1)
	}
}

// TestE2EPostgresFrozenMidRun: Postgres stops answering (SIGSTOP) for 20 s
// in the middle of a run, shorter than the TTL. /readyz says 503 while it
// is frozen; afterwards the run succeeds in its first attempt with every
// sample, and nothing was failed over.
func TestE2EPostgresFrozenMidRun(t *testing.T) {
	pg := testenv.NewOwnPostgres(t)
	f := newE2EFarmWith(t, e2eDeps{dbURL: pg.URL()}, coordinator.Config{HeartbeatTTL: 30 * time.Second})
	ra := startAgent(t, Config{NATSURL: f.url, Name: "e2e-frozen"})
	spec := f.spec.Clone()
	spec.Retry.MaxAttempts = 2
	_, runs, err := f.c.Store().CreateRuns(context.Background(), &store.CreateRunsParams{Spec: spec, Build: "e2e", Fanout: true, Source: "test"})
	if err != nil || len(runs) != 1 {
		t.Fatalf("runs %v err %v", runs, err)
	}
	id := runs[0].ID
	first := f.waitRun(t, id, store.RunRunning, 2*time.Minute)
	waitFor(t, time.Minute, "agent running the run", func() bool { return ra.a.Status().RunState == "running" })
	pg.Freeze()
	frozen := time.Now()
	ready := func() int {
		resp, err := http.Get("http://" + f.c.HTTPAddr() + "/readyz")
		if err != nil {
			return -1
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := ready(); code != http.StatusServiceUnavailable || time.Since(frozen) > 2500*time.Millisecond {
		pg.Thaw()
		t.Fatalf("/readyz with Postgres frozen: %d after %v, want 503 within the 2 s probe timeout", code, time.Since(frozen))
	}
	// The outage itself: its length is the scenario (past lease and
	// heartbeat TTLs), so no event can stand in for the clock here.
	time.Sleep(time.Until(frozen.Add(20 * time.Second)))
	pg.Thaw()
	done := f.waitRun(t, id, store.RunSucceeded, 2*time.Minute)
	if done.Attempts != 1 || done.Token != first.Token {
		t.Fatalf("run %d: attempts %d token %d, want 1 attempt under token %d (error %q)", id, done.Attempts, done.Token, first.Token, done.Error)
	}
	want := expectedSamples(spec)
	waitFor(t, 30*time.Second, "every sample ingested", func() bool {
		n, err := f.c.Store().CountSamples(context.Background(), id)
		return err == nil && n == want
	})
	if code := ready(); code != http.StatusOK {
		t.Fatalf("/readyz after the thaw: %d", code)
	}
}
