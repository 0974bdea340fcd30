package ingest_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/ingest"
	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/protocol"
)

// TestIngestRejectsGarbageValues is issue 29's finding 2 at the boundary:
// telemetry for a config the run does not have, byte counts beyond the
// model, and a batch re-sent with other content are rejected (the first
// copy stays); a result with decode_tps.mean = 1e308 fails its run with
// the field named instead of going green; every refusal is charged to the
// device, which is quarantined (drained with a reason) at the threshold.
func TestIngestRejectsGarbageValues(t *testing.T) {
	ctx := context.Background()
	e := setup(t)
	run := e.run.Run.ID
	sub := protocol.DeviceTelemetrySubject("dev-1", run)
	good := batch(e.run, 0, 5)
	publish(t, e, sub, good)
	cfg99 := batch(e.run, 1, 2)
	cfg99.Samples[1].ConfigIndex = 99
	publish(t, e, sub, cfg99)
	huge := batch(e.run, 2, 2)
	huge.Samples[0].BytesRead = 1 << 40 // the smoke model has 33 MB
	publish(t, e, sub, huge)
	ing := startIngest(t, e, ingest.Config{QuarantineAfter: 4})
	waitFor(t, "the good batch stored, two rejected", 10*time.Second, func() bool {
		n, _ := e.st.CountSamples(ctx, run)
		return n == 5 && rejections(t, e, "dev-1") == 2
	})
	// The same seq again, other content: refused, the first copy stays.
	again := batch(e.run, 0, 5)
	again.Samples[2].DurationNS = 9e9
	publish(t, e, sub, again)
	waitFor(t, "the re-send refused", 10*time.Second, func() bool { return rejections(t, e, "dev-1") == 3 })
	var durs []int64
	if err := e.st.Pool().QueryRow(ctx, `SELECT duration_ns FROM sample_batches WHERE run_id = $1 AND seq = 0`, run).Scan(&durs); err != nil {
		t.Fatal(err)
	}
	if durs[2] != good.Samples[2].DurationNS {
		t.Fatalf("seq 0 replaced: %v", durs)
	}

	res := &protocol.Result{RunID: run, Token: e.run.Token, DeviceID: "dev-1", Outcome: protocol.OutcomeSucceeded, TelemetryBatches: 1, TelemetrySamples: 5,
		Configs: []protocol.ConfigResult{{ConfigIndex: 0, ConfigKey: "resident", Valid: true, DecodeTPS: protocol.Stat{N: 1, Mean: 1e308}}}}
	publish(t, e, protocol.DeviceResultSubject("dev-1", run), res)
	var r *store.Run
	waitFor(t, "the run failed", 10*time.Second, func() bool {
		r, _ = e.st.GetRun(ctx, run)
		return store.TerminalState(r.State) || r.State == store.RunQueued
	})
	if r.State == store.RunSucceeded || !strings.Contains(r.Error, "decode_tps.mean") {
		t.Fatalf("run %s (%q); want it failed naming decode_tps.mean", r.State, r.Error)
	}
	if rs, _ := e.st.ListResults(ctx, &store.ListResultsParams{RunID: run, Limit: 10}); len(rs) != 0 {
		t.Fatalf("%d result rows stored from a rejected result", len(rs))
	}
	waitFor(t, "the device quarantined", 10*time.Second, func() bool {
		d, _ := e.st.GetDevice(ctx, "dev-1")
		return d.Drained
	})
	rj, _ := e.st.GetDeviceRejections(ctx, "dev-1")
	if rj.Total != 4 || !strings.Contains(rj.DrainReason, "quarantined") {
		t.Fatalf("rejections %+v", rj)
	}
	if st := ing.Stats(); st.Quarantined != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestIngestNoGreenWithoutMeasurements is finding 3: a succeeded result
// whose configs are all invalid (decode_tokens beyond the model's context)
// ends its run as a failure that says why.
func TestIngestNoGreenWithoutMeasurements(t *testing.T) {
	ctx := context.Background()
	e := setup(t)
	run := e.run.Run.ID
	startIngest(t, e, ingest.Config{})
	publish(t, e, protocol.DeviceResultSubject("dev-1", run), &protocol.Result{RunID: run, Token: e.run.Token, DeviceID: "dev-1", Outcome: protocol.OutcomeSucceeded,
		Configs: []protocol.ConfigResult{
			{ConfigIndex: 0, ConfigKey: "resident", InvalidReason: "prompt and decode exceed the context (272 > 256)"},
			{ConfigIndex: 1, ConfigKey: "on-demand/budget=50%", Error: "context overflow"},
		}})
	var r *store.Run
	waitFor(t, "the run ended", 10*time.Second, func() bool {
		r, _ = e.st.GetRun(ctx, run)
		return store.TerminalState(r.State) || r.State == store.RunQueued
	})
	if r.State == store.RunSucceeded || !strings.Contains(r.Error, "no valid measurement") || !strings.Contains(r.Error, "exceed the context") {
		t.Fatalf("run %s (%q); want a failure saying no valid measurement", r.State, r.Error)
	}
}
