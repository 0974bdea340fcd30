package loadtest

import (
	"context"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/lesfarm/lesfarm/coordinator"
	"github.com/lesfarm/lesfarm/coordinator/coordinatortest"
	"github.com/lesfarm/lesfarm/coordinator/natsauth"
	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/internal/embedded"
	"github.com/lesfarm/lesfarm/internal/testenv"
	"github.com/lesfarm/lesfarm/protocol"
)

func TestMain(m *testing.M) { os.Exit(testenv.Run(m)) }

func quiet() *slog.Logger {
	if os.Getenv("LESFARM_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// strictFarm starts a NATS server that authenticates every device with its
// own credential (natsauth, strict) and one coordinator on it.
func strictFarm(t *testing.T) (*coordinator.Coordinator, *server.Server) {
	t.Helper()
	auth, err := natsauth.New(natsauth.Config{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	ns, err := embedded.StartNATS(embedded.NATSConfig{StoreDir: t.TempDir(), Auth: auth})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	c, err := coordinator.New(coordinatortest.Config(t, coordinator.Config{Name: "lt", HTTPAddr: "127.0.0.1:0", ArtifactBaseURL: "http://127.0.0.1:1",
		NoNightly: true, NoRegress: os.Getenv("LT_NOREGRESS") != "", Logger: quiet()},
		testenv.MigratedPostgresURL(t), ns.ClientURL(), auth.CoordinatorOptions()...))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	auth.SetVerifier(c.Store())
	return c, ns
}

// TestLoadShort: 20 simulated agents for 5 s against a coordinator whose
// NATS enforces per-device credentials; every run succeeds, every sample
// sent is stored once, and the report has its figures.
func TestLoadShort(t *testing.T) {
	c, ns := strictFarm(t)
	rep, err := Run(context.Background(), Config{Agents: 20, Duration: 5 * time.Second, NATSURL: ns.ClientURL(), Store: c.Store(),
		MetricsURLs: []string{"http://" + c.HTTPAddr() + "/metrics"}, RunLength: time.Second, BatchInterval: 200 * time.Millisecond,
		DrainTimeout: 3 * time.Minute, Logger: quiet()})
	if err != nil {
		t.Fatalf("%v\n%s", err, rep.JSON())
	}
	t.Logf("%s", rep.JSON())
	if !rep.OK() {
		t.Fatalf("lost %d, duplicated %d samples, %d duplicated assignments", rep.LostSamples, rep.DuplicatedSamples, rep.DuplicatedAssignments)
	}
	if rep.FailedRuns != 0 {
		t.Errorf("%d runs did not succeed", rep.FailedRuns)
	}
	if rep.TriggerToAssign.N != 20 {
		t.Errorf("trigger → assign measured for %d runs, want the burst of 20", rep.TriggerToAssign.N)
	}
	if rep.ResultToNext.N == 0 || rep.Assignments <= 20 {
		t.Errorf("no agent got a second run in 5 s of 1 s runs: %d assignments, %d result → next", rep.Assignments, rep.ResultToNext.N)
	}
	if rep.SamplesSent == 0 || rep.SamplesStored != rep.SamplesSent {
		t.Errorf("sent %d samples, stored %d", rep.SamplesSent, rep.SamplesStored)
	}
	// 100 samples/s × 48 layers in 200 ms batches: 20 samples each.
	if rep.SamplesPerBatch != 20 || rep.BatchBytes < 2000 {
		t.Errorf("batches of %d samples, %d bytes", rep.SamplesPerBatch, rep.BatchBytes)
	}
	if len(rep.Coordinators) != 1 || rep.Coordinators[0].RSSMaxBytes <= 0 || rep.Coordinators[0].SamplesCommitted <= 0 || rep.IngestedPerS <= 0 {
		t.Errorf("coordinator figures missing: %+v, ingested %g/s", rep.Coordinators, rep.IngestedPerS)
	}
	// The agents' credentials are revoked at the end.
	creds, err := c.Store().ListDeviceCredentials(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	for _, cr := range creds {
		if strings.HasPrefix(cr.DeviceID, "lt-"+rep.Session) && cr.RevokedAt == nil {
			t.Fatalf("credential of %s not revoked", cr.DeviceID)
		}
	}
}

func TestTally(t *testing.T) {
	ok := func(token int64) runEnd { return runEnd{state: store.RunSucceeded, token: token, attempts: 1} }
	again := func(token int64) runEnd { return runEnd{state: store.RunSucceeded, token: token, attempts: 2} }
	type a = attempt
	for _, tc := range []struct {
		name   string
		sent   map[attempt]int64
		ends   map[int64]runEnd
		stored map[int64]int64
		saw    map[int64]bool
		// unsettled: the drain bound passed before every run was
		// terminal and stored.
		unsettled bool
		want      tallied
	}{
		{"exact", map[a]int64{{1, 7}: 10, {2, 8}: 5}, map[int64]runEnd{1: ok(7), 2: ok(8)}, map[int64]int64{1: 10, 2: 5}, nil, false,
			tallied{stored: 15}},
		{"lost", map[a]int64{{1, 7}: 10, {2, 8}: 5}, map[int64]runEnd{1: ok(7), 2: ok(8)}, map[int64]int64{1: 7}, nil, false,
			tallied{stored: 7, lost: 8}},
		{"dup", map[a]int64{{1, 7}: 10}, map[int64]runEnd{1: ok(7)}, map[int64]int64{1: 12}, nil, false, tallied{stored: 12, dup: 2}},
		{"rows without a reporting attempt", map[a]int64{{1, 7}: 10}, map[int64]runEnd{1: ok(7), 3: ok(9)}, map[int64]int64{1: 10, 3: 4}, nil, false,
			tallied{stored: 14, dup: 4}},
		{"both", map[a]int64{{1, 1}: 10, {2, 2}: 10}, map[int64]runEnd{1: ok(1), 2: ok(2)}, map[int64]int64{1: 9, 2: 11}, nil, false,
			tallied{stored: 20, lost: 1, dup: 1}},
		// Run 1's first attempt (token 3) was superseded by token 4: its
		// samples are fenced out, and only token 4's count.
		{"superseded attempt", map[a]int64{{1, 3}: 500, {1, 4}: 500}, map[int64]runEnd{1: again(4)}, map[int64]int64{1: 500}, nil, false,
			tallied{stored: 500, superseded: 1, supersededSamples: 500, reassigned: 1}},
		// ... but a missing row of the completing attempt is still lost.
		{"superseded and lost", map[a]int64{{1, 3}: 500, {1, 4}: 500}, map[int64]runEnd{1: again(4)}, map[int64]int64{1: 450}, nil, false,
			tallied{stored: 450, lost: 50, superseded: 1, supersededSamples: 500, reassigned: 1}},
		{"unfinished at the bound", map[a]int64{{1, 3}: 500, {2, 5}: 500}, map[int64]runEnd{1: {state: store.RunQueued, attempts: 1}, 2: ok(5)},
			map[int64]int64{2: 500}, nil, true, tallied{stored: 500, unfinished: 1, unfinishedSamples: 500}},
		// A succeeded run whose last batches are still in the stream at
		// the bound is unfinished, not lossy.
		{"samples in flight at the bound", map[a]int64{{1, 3}: 500}, map[int64]runEnd{1: ok(3)}, map[int64]int64{1: 450}, nil, true,
			tallied{stored: 450, unfinished: 1, unfinishedSamples: 50}},
		{"failed", map[a]int64{{1, 3}: 500}, map[int64]runEnd{1: {state: store.RunFailed, token: 3, attempts: 3}}, nil, nil, false,
			tallied{failed: 1, reassigned: 1, superseded: 1, supersededSamples: 500}},
		{"agent saw a second grant", map[a]int64{{1, 3}: 10}, map[int64]runEnd{1: ok(3)}, map[int64]int64{1: 10}, map[int64]bool{1: true}, false,
			tallied{stored: 10, reassigned: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tally(tc.sent, tc.ends, tc.stored, tc.saw, !tc.unsettled); got != tc.want {
				t.Fatalf("tally = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestSettled(t *testing.T) {
	sent := map[attempt]int64{{1, 3}: 10, {1, 4}: 10}
	for _, tc := range []struct {
		name   string
		ends   map[int64]runEnd
		stored map[int64]int64
		want   bool
	}{
		{"all stored", map[int64]runEnd{1: {state: store.RunSucceeded, token: 4}}, map[int64]int64{1: 10}, true},
		{"rows missing", map[int64]runEnd{1: {state: store.RunSucceeded, token: 4}}, map[int64]int64{1: 9}, false},
		{"active", map[int64]runEnd{1: {state: store.RunRunning, token: 4}}, map[int64]int64{1: 10}, false},
		{"failed", map[int64]runEnd{1: {state: store.RunFailed, token: 4}}, nil, true},
	} {
		if got := settled(sent, tc.ends, tc.stored); got != tc.want {
			t.Errorf("%s: settled = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestParseMetrics(t *testing.T) {
	m, err := parseMetrics(strings.NewReader(`# HELP x
# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total 12.5
process_resident_memory_bytes 1.2345e+08
lesfarm_ingest_lag_messages{stream="TELEMETRY"} 3
lesfarm_ingest_lag_messages{stream="RESULTS"} 4
lesfarm_ingest_samples_total 1000
bad line
`))
	if err != nil {
		t.Fatal(err)
	}
	if m["process_cpu_seconds_total"] != 12.5 || m["process_resident_memory_bytes"] != 123450000 || m["lesfarm_ingest_lag_messages"] != 7 || m["lesfarm_ingest_samples_total"] != 1000 {
		t.Fatalf("parsed %v", m)
	}
}

func TestConfigErrors(t *testing.T) {
	st := &store.Store{}
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Agents: 0, Duration: time.Second, Store: st, NATSURL: "x"}, "agents 0"},
		{Config{Agents: 1, Duration: 0, Store: st, NATSURL: "x"}, "duration"},
		{Config{Agents: 1, Duration: time.Second, NATSURL: "x"}, "Store and NATSURL"},
		{Config{Agents: 1, Duration: time.Second, Store: st, NATSURL: "x", SamplesPerSecond: 1e6}, "samples per batch"},
		{Config{Agents: 1, Duration: time.Second, Store: st, NATSURL: "x", Layers: 600}, "layers 600"},
		{Config{Agents: 1, Duration: time.Second, Store: st, NATSURL: "x", RunLength: time.Millisecond}, "run length"},
	} {
		_, err := Run(context.Background(), tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err %v, want %q", tc.cfg, err, tc.want)
		}
	}
}

// TestHeldRunsUntilSettled: a finished run stays in the agent's heartbeats
// as "finishing" until the coordinator names that attempt in a cancel (its
// lease is gone: the result was committed or rejected); an older
// attempt's notice leaves a newer grant of the same run alone.
func TestHeldRunsUntilSettled(t *testing.T) {
	a := newSimAgent(&loadRun{}, "lt-x-00000", "secret")
	a.held[7] = heldRun{token: 5, state: protocol.RunStateRunning}
	a.finishing(7, 4) // a stale attempt's result: no change
	if got := a.heldStatus(); len(got) != 1 || got[0].State != protocol.RunStateRunning {
		t.Fatalf("after a stale attempt finished: %+v", got)
	}
	a.finishing(7, 5)
	got := a.heldStatus()
	if len(got) != 1 || got[0].RunID != 7 || got[0].Token != 5 || got[0].State != protocol.RunStateFinishing || got[0].Progress != 1 {
		t.Fatalf("finished run not reported as finishing: %+v", got)
	}
	if st := a.drop(7, 4); st != "" || len(a.heldStatus()) != 1 {
		t.Fatalf("an older attempt's cancel dropped the current one (%q)", st)
	}
	if st := a.drop(7, 5); st != protocol.RunStateFinishing || len(a.heldStatus()) != 0 {
		t.Fatalf("settled run still held (%q): %+v", st, a.heldStatus())
	}
	if err := (&protocol.Heartbeat{V: protocol.Version, DeviceID: a.id, Seq: 1, Runs: got, SentAt: time.Now()}).Validate(); err != nil {
		t.Fatalf("a heartbeat listing the finishing run is invalid: %v", err)
	}
}
