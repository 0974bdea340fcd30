package agent

import (
	"cmp"
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/coordinator"
	coordartifact "github.com/lesfarm/lesfarm/coordinator/artifact"
	"github.com/lesfarm/lesfarm/coordinator/coordinatortest"
	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/internal/testenv"
	"github.com/lesfarm/lesfarm/jobs"
)

func TestMain(m *testing.M) {
	code := testenv.Run(m)
	removeSharedBuild()
	os.Exit(code)
}

// crash simulates the agent process dying: the connection drops at once,
// the current run stops without a report and nothing more is sent.
func (a *Agent) crash() {
	a.mu.Lock()
	if r := a.current; r != nil {
		r.abandoned = true
		r.cancel(errCutOff)
	}
	nc := a.nc
	a.mu.Unlock()
	nc.Close()
}

type e2eFarm struct {
	c     *coordinator.Coordinator
	url   string
	dbURL string
	spec  *jobs.Spec
	// cfg is the coordinator's config, for starting a replacement.
	cfg coordinator.Config
}

// newE2EFarm starts a real coordinator (Postgres, embedded-in-test NATS,

// startCoordinator starts a coordinator for an end-to-end test with fast
// liveness timings (device TTL 2 s, lost grace 300 ms, sweeps every
// 200 ms) in the fields cfg leaves zero, no nightly scheduler, and a logger
// that prints only with -v; it stops when the test ends.
func startCoordinator(t *testing.T, cfg coordinator.Config) *coordinator.Coordinator {
	t.Helper()
	cfg.HTTPAddr = cmp.Or(cfg.HTTPAddr, "127.0.0.1:0")
	cfg.HeartbeatTTL = cmp.Or(cfg.HeartbeatTTL, 2*time.Second)
	cfg.LostGrace = cmp.Or(cfg.LostGrace, 300*time.Millisecond)
	cfg.SweepInterval = cmp.Or(cfg.SweepInterval, 200*time.Millisecond)
	cfg.DispatchInterval = cmp.Or(cfg.DispatchInterval, 200*time.Millisecond)
	cfg.Ingest.AckWait = cmp.Or(cfg.Ingest.AckWait, 5*time.Second)
	cfg.Ingest.FetchWait = cmp.Or(cfg.Ingest.FetchWait, 50*time.Millisecond)
	cfg.NoNightly = true
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
		if testing.Verbose() {
			cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
		}
	}
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

// HTTP artifact store holding the trained fixture model).
func newE2EFarm(t *testing.T) *e2eFarm {
	t.Helper()
	return newE2EFarmWith(t, e2eDeps{}, coordinator.Config{})
}

// e2eDeps are where an end-to-end farm's coordinator finds Postgres and
// NATS; an empty field means a fresh migrated database, or a NATS server
// of the farm's own. Fault tests pass servers of their own.
type e2eDeps struct {
	dbURL, natsURL string
}

// newE2EFarmWith is newE2EFarm on deps with coordinator settings (timings)
// from base; store, NATS connection, name and artifact dir are filled in.
func newE2EFarmWith(t *testing.T, deps e2eDeps, base coordinator.Config) *e2eFarm {
	t.Helper()
	model := trainedModel(t)
	spec := smokeSpec(t)
	if deps.dbURL == "" {
		deps.dbURL = testenv.MigratedPostgresURL(t)
	}
	if deps.natsURL == "" {
		deps.natsURL = testenv.NATS(t).ClientURL()
	}
	artDir := t.TempDir()
	files, err := coordartifact.New(coordartifact.Config{Dir: artDir})
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(model)
	if err != nil {
		t.Fatal(err)
	}
	info, err := files.Put(f, coordartifact.PutOptions{SHA256: spec.Model.SHA256, Size: int64(spec.Model.Size)})
	f.Close()
	if err != nil {
		t.Fatalf("fixture model does not match the smoke suite's sha256/size: %v", err)
	}
	base.Name, base.ArtifactDir = "c1", artDir
	base = coordinatortest.Config(t, base, deps.dbURL, deps.natsURL)
	c := startCoordinator(t, base)
	if _, err := c.Store().PutArtifact(context.Background(), info.SHA256, info.Size, spec.Model.Name); err != nil {
		t.Fatal(err)
	}
	return &e2eFarm{c: c, url: deps.natsURL, dbURL: deps.dbURL, spec: spec, cfg: base}
}

func (f *e2eFarm) waitRun(t *testing.T, id int64, state string, within time.Duration) *store.Run {
	t.Helper()
	var r *store.Run
	waitFor(t, within, "run "+state, func() bool {
		var err error
		r, err = f.c.Store().GetRun(context.Background(), id)
		return err == nil && r.State == state
	})
	return r
}

// expectedSamples is the telemetry samples of one attempt: per prompt one
// prefill step and DecodeTokens-1 decode steps, per config and repetition.
func expectedSamples(spec *jobs.Spec) int64 {
	return int64(len(spec.ResolvePrompts()) * spec.DecodeTokens * len(spec.Expand()) * (spec.Warmup + spec.Repetitions))
}

// TestE2ETwoAgentsRunSmoke: two host agents register with a real
// coordinator, a fanout trigger of the smoke suite puts one run on each,
// and both runs end succeeded with their results and every sample in
// Postgres.
func TestE2ETwoAgentsRunSmoke(t *testing.T) {
	f := newE2EFarm(t)
	startAgent(t, Config{NATSURL: f.url, Name: "e2e-a", Labels: map[string]string{"pool": "ci"}})
	startAgent(t, Config{NATSURL: f.url, Name: "e2e-b", Labels: map[string]string{"pool": "ci"}})
	_, runs, err := f.c.Store().CreateRuns(context.Background(), &store.CreateRunsParams{Spec: f.spec, Build: "e2e", GitSHA: "deadbeef", Fanout: true, Source: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 2 {
		t.Fatalf("fanout created %d runs, want one per agent", len(runs))
	}
	devices := map[string]bool{}
	for _, r := range runs {
		done := f.waitRun(t, r.ID, store.RunSucceeded, 3*time.Minute)
		devices[done.DeviceID] = true
		res, err := f.c.Store().ListResults(context.Background(), &store.ListResultsParams{RunID: r.ID, Limit: 10})
		if err != nil || len(res) != 2 {
			t.Fatalf("run %d: results %v, err %v", r.ID, res, err)
		}
		want := expectedSamples(f.spec)
		waitFor(t, 30*time.Second, "samples ingested", func() bool {
			n, err := f.c.Store().CountSamples(context.Background(), r.ID)
			return err == nil && n == want
		})
		checkExpertLoad(t, f.c.Store(), r.ID, len(f.spec.Expand()))
	}
	if !devices["e2e-a"] || !devices["e2e-b"] {
		t.Fatalf("runs ran on %v, want both agents", devices)
	}
}

// TestE2EAgentKilledMidRun: the agent dies mid-run; the coordinator marks
// it lost and requeues the run; the restarted agent (same name, same cache)
// runs the new attempt, and nothing it reports lands in the old lease.
func TestE2EAgentKilledMidRun(t *testing.T) {
	f := newE2EFarm(t)
	spec := f.spec.Clone()
	spec.Repetitions = 30 // long enough to be killed mid-run
	if raceEnabled {
		spec.Repetitions = 4
	}
	spec.Retry.MaxAttempts = 3
	cache := t.TempDir()
	a1 := startAgent(t, Config{NATSURL: f.url, Name: "e2e-k", CacheDir: cache, ShutdownTimeout: time.Second})
	_, runs, err := f.c.Store().CreateRuns(context.Background(), &store.CreateRunsParams{Spec: spec, Build: "e2e", Fanout: true, Source: "test"})
	if err != nil || len(runs) != 1 {
		t.Fatalf("runs %v err %v", runs, err)
	}
	id := runs[0].ID
	first := f.waitRun(t, id, store.RunRunning, 2*time.Minute)
	waitFor(t, 2*time.Minute, "telemetry flowing", func() bool {
		st := a1.a.Status()
		return st.RunState == "running" && st.Published > 0
	})
	a1.a.crash()
	a1.stop()
	<-a1.done
	a1.done <- nil

	// The coordinator notices the loss and requeues the run (pinned to this
	// device): the first lease is gone.
	waitFor(t, 30*time.Second, "run requeued", func() bool {
		r, err := f.c.Store().GetRun(context.Background(), id)
		return err == nil && (r.State == store.RunQueued || r.Token != first.Token)
	})
	startAgent(t, Config{NATSURL: f.url, Name: "e2e-k", CacheDir: cache})
	done := f.waitRun(t, id, store.RunSucceeded, 3*time.Minute)
	// Attempts may exceed 2: the coordinator can try the dead device once
	// more ("no responders") before it marks it lost.
	if done.Attempts < 2 || done.Token == first.Token {
		t.Fatalf("run after restart: attempts %d token %d (first token %d)", done.Attempts, done.Token, first.Token)
	}
	res, err := f.c.Store().ListResults(context.Background(), &store.ListResultsParams{RunID: id, Limit: 10})
	if err != nil || len(res) != 2 {
		t.Fatalf("results %d err %v, want exactly one attempt's 2 configs", len(res), err)
	}
	t.Logf("ingest stats after the restart: %+v", f.c.IngestStats())
}
