package ingest_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lesfarm/lesfarm/coordinator/ingest"
	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/internal/testenv"
	"github.com/lesfarm/lesfarm/jobs"
	"github.com/lesfarm/lesfarm/protocol"
)

func TestMain(m *testing.M) { os.Exit(testenv.Run(m)) }

type env struct {
	st  *store.Store
	ns  *server.Server
	js  jetstream.JetStream
	nc  *nats.Conn
	run *store.Grant
}

func setup(t testing.TB) *env {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, testenv.MigratedPostgresURL(t), store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	ns := testenv.NATS(t)
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := ingest.EnsureStreams(ctx, js); err != nil {
		t.Fatal(err)
	}
	ram := int64(8 << 30)
	if _, err := st.UpsertDevice(ctx, &store.UpsertDeviceParams{ID: "dev-1", TTL: time.Minute, Fingerprint: protocol.Fingerprint{Platform: "linux", RAMBytes: &ram}}); err != nil {
		t.Fatal(err)
	}
	spec, _ := jobs.Builtin("smoke")
	_, runs, err := st.CreateRuns(ctx, &store.CreateRunsParams{Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	g, err := st.ClaimRun(ctx, &store.ClaimRunParams{DeviceID: "dev-1", RunIDs: []int64{runs[0].ID}, LeaseTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return &env{st: st, ns: ns, js: js, nc: nc, run: g}
}

func batch(g *store.Grant, seq uint64, n int) *protocol.TelemetryBatch {
	b := &protocol.TelemetryBatch{RunID: g.Run.ID, Token: g.Token, DeviceID: "dev-1", Seq: seq, SentAt: time.Now()}
	for i := range n {
		l := []int32{1, 2, 3, 4, 5, 6}
		b.Samples = append(b.Samples, protocol.Sample{ConfigIndex: 1, Step: int(seq)*n + i, Phase: protocol.PhaseDecode, Tokens: 1,
			DurationNS: 1e7, StallNS: 1e6, BytesRead: 147456, CacheBytes: 1 << 20,
			Layers: &protocol.LayerCounts{Hits: l, Misses: l, PrefetchUsed: l, PrefetchWasted: l}})
	}
	return b
}

func publish(t testing.TB, e *env, subject string, msg protocol.Message) {
	t.Helper()
	data, err := protocol.Encode(msg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.js.Publish(context.Background(), subject, data); err != nil {
		t.Fatal(err)
	}
}

func waitFor(t testing.TB, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, timeout, 20*time.Millisecond, func() error {
		if !cond() {
			return fmt.Errorf("waiting for %s", what)
		}
		return nil
	})
}

func TestIngestExactlyOnceWithDuplicatesAndJunk(t *testing.T) {
	ctx := context.Background()
	e := setup(t)
	const batches, per = 40, 50
	for s := range batches {
		b := batch(e.run, uint64(s), per)
		publish(t, e, protocol.TelemetrySubject(e.run.Run.ID), b)
		if s%4 == 0 { // redelivered by an agent after a reconnect
			publish(t, e, protocol.TelemetrySubject(e.run.Run.ID), b)
		}
	}
	// Junk: not JSON, wrong subject/run, stale token.
	if _, err := e.js.Publish(ctx, protocol.TelemetrySubject(e.run.Run.ID), []byte("{garbage")); err != nil {
		t.Fatal(err)
	}
	publish(t, e, protocol.TelemetrySubject(e.run.Run.ID+1000), batch(e.run, 99, 1))
	stale := batch(e.run, 100, 3)
	stale.Token++
	publish(t, e, protocol.TelemetrySubject(e.run.Run.ID), stale)

	ing, err := ingest.New(ingest.Config{JS: e.js, Store: e.st, FetchMessages: 16})
	if err != nil {
		t.Fatal(err)
	}
	if err := ing.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "all samples", 20*time.Second, func() bool {
		n, _ := e.st.CountSamples(ctx, e.run.Run.ID)
		return n == batches*per && ing.Stats().Rejected == 2 && ing.Stats().Stale == 1
	})
	// Result with a stale token is rejected; the real one completes the run.
	publish(t, e, protocol.ResultSubject(e.run.Run.ID), &protocol.Result{RunID: e.run.Run.ID, Token: e.run.Token + 1, DeviceID: "dev-1", Outcome: "succeeded"})
	publish(t, e, protocol.ResultSubject(e.run.Run.ID), &protocol.Result{RunID: e.run.Run.ID, Token: e.run.Token, DeviceID: "dev-1", Outcome: "succeeded",
		TelemetryBatches: batches, TelemetrySamples: batches * per,
		Configs: []protocol.ConfigResult{{ConfigIndex: 0, ConfigKey: "resident", Valid: true, DecodeTPS: protocol.Stat{N: 1, Mean: 10}}}})
	waitFor(t, "run completion", 10*time.Second, func() bool {
		r, _ := e.st.GetRun(ctx, e.run.Run.ID)
		return r.State == store.RunSucceeded
	})
	if err := ing.Stop(); err != nil {
		t.Fatal(err)
	}
	st := ing.Stats()
	keys, _ := e.st.SampleKeys(ctx, e.run.Run.ID)
	if len(keys) != batches*per {
		t.Fatalf("%d samples stored, want %d", len(keys), batches*per)
	}
	for i, k := range keys {
		if k != [2]int{i / per, i % per} {
			t.Fatalf("sample %d has key %v", i, k)
		}
	}
	if st.Stale != 2 || st.Results != 1 || st.SamplesInserted != batches*per {
		t.Fatalf("stats %+v", st)
	}
	if ing.Rejects().Total() != 4 {
		t.Fatalf("rejects: %s", ing.Rejects())
	}
}

// TestIngestCrashBetweenConsumeAndCommit stops an ingester after it fetched
// batches but before it committed them, starts a new one, and checks the
// exact sample count: with one fetch per transaction, and with a
// transaction topped up from the backlog by several fetches.
func TestIngestCrashBetweenConsumeAndCommit(t *testing.T) {
	for _, c := range []struct {
		name          string
		commit, first int // CommitMessages; messages in the first transaction
	}{{"one fetch per commit", 8, 8}, {"three fetches per commit", 24, 24}} {
		t.Run(c.name, func(t *testing.T) { crashBetweenConsumeAndCommit(t, c.commit, c.first) })
	}
}

func crashBetweenConsumeAndCommit(t *testing.T, commit, first int) {
	ctx := context.Background()
	e := setup(t)
	const batches, per = 30, 20
	for s := range batches {
		publish(t, e, protocol.TelemetrySubject(e.run.Run.ID), batch(e.run, uint64(s), per))
	}
	var commits atomic.Int32
	crashed := make(chan struct{})
	ing1, err := ingest.New(ingest.Config{JS: e.js, Store: e.st, Workers: 1, FetchMessages: 8, CommitMessages: commit, AckWait: time.Second,
		BeforeCommit: func() error {
			if commits.Add(1) == 2 { // the second batch: fetched, never committed
				close(crashed)
				return errors.New("crash")
			}
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	if err := ing1.Start(ctx); err != nil {
		t.Fatal(err)
	}
	<-crashed
	if err := ing1.Stop(); err == nil {
		t.Fatal("crashed worker reported no error")
	}
	n, _ := e.st.CountSamples(ctx, e.run.Run.ID)
	if n != int64(first*per) {
		t.Fatalf("after crash: %d samples, want exactly the first committed batch (%d)", n, first*per)
	}
	ing2, err := ingest.New(ingest.Config{JS: e.js, Store: e.st, AckWait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := ing2.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer ing2.Stop()
	waitFor(t, "redelivery", 20*time.Second, func() bool {
		n, _ := e.st.CountSamples(ctx, e.run.Run.ID)
		return n == batches*per
	})
	testenv.WaitAcked(t, e.ns, 20*time.Second) // nothing left to redeliver: no late duplicates can appear
	if n, _ := e.st.CountSamples(ctx, e.run.Run.ID); n != batches*per {
		t.Fatalf("%d samples, want %d", n, batches*per)
	}
}

// TestIngestDeviceScopedSubjects checks the device-id defense: telemetry and
// results on a subject naming a device (lesfarm.v1.telemetry.<device>.<run>)
// are stored only when the body's device_id is that device; a mismatch is
// rejected and counted even though token and run are right.
func TestIngestDeviceScopedSubjects(t *testing.T) {
	ctx := context.Background()
	e := setup(t)
	run := e.run.Run.ID
	publish(t, e, protocol.DeviceTelemetrySubject("dev-1", run), batch(e.run, 0, 5))
	publish(t, e, protocol.DeviceTelemetrySubject("dev-2", run), batch(e.run, 1, 7)) // body says dev-1
	publish(t, e, protocol.DeviceResultSubject("dev-2", run), &protocol.Result{RunID: run, Token: e.run.Token, DeviceID: "dev-1", Outcome: "succeeded"})

	ing, err := ingest.New(ingest.Config{JS: e.js, Store: e.st, FetchMessages: 16})
	if err != nil {
		t.Fatal(err)
	}
	if err := ing.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ing.Stop() }()
	waitFor(t, "one batch stored, two rejected", 10*time.Second, func() bool {
		n, _ := e.st.CountSamples(ctx, run)
		return n == 5 && ing.Rejects().Total() == 2
	})
	if r, _ := e.st.GetRun(ctx, run); r.State == store.RunSucceeded {
		t.Fatal("a result on another device's subject completed the run")
	}
	publish(t, e, protocol.DeviceResultSubject("dev-1", run), &protocol.Result{RunID: run, Token: e.run.Token, DeviceID: "dev-1", Outcome: "succeeded",
		TelemetryBatches: 1, TelemetrySamples: 5,
		Configs: []protocol.ConfigResult{{ConfigIndex: 0, ConfigKey: "resident", Valid: true, DecodeTPS: protocol.Stat{N: 1, Mean: 10}}}})
	waitFor(t, "run completion on the device's own subject", 10*time.Second, func() bool {
		r, _ := e.st.GetRun(ctx, run)
		return r.State == store.RunSucceeded
	})
	if n, _ := e.st.CountSamples(ctx, run); n != 5 || ing.Rejects().Total() != 2 {
		t.Fatalf("%d samples, rejects %s; want 5 samples and 2 rejects", n, ing.Rejects())
	}
}
