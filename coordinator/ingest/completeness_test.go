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

// TestIngestHoldsResultUntilTelemetryComplete is issue 29, finding 7: a
// succeeded result that says 10 samples were sent, with 5 stored, does not
// complete its run; once the other 5 arrive it does. The sent and stored
// counts are recorded for the run.
func TestIngestHoldsResultUntilTelemetryComplete(t *testing.T) {
	ctx := context.Background()
	e := setup(t)
	run := e.run.Run.ID
	sub := protocol.DeviceTelemetrySubject("dev-1", run)
	publish(t, e, sub, batch(e.run, 0, 5))
	ing := startIngest(t, e, ingest.Config{TelemetryWait: time.Hour})
	waitFor(t, "the first batch", 10*time.Second, func() bool { n, _ := e.st.CountSamples(ctx, run); return n == 5 })
	publish(t, e, protocol.DeviceResultSubject("dev-1", run), &protocol.Result{RunID: run, Token: e.run.Token, DeviceID: "dev-1",
		Outcome: protocol.OutcomeSucceeded, TelemetryBatches: 2, TelemetrySamples: 10,
		Configs: []protocol.ConfigResult{{ConfigIndex: 0, ConfigKey: "resident", Valid: true, DecodeTPS: protocol.Stat{N: 1, Mean: 10}}}})
	waitFor(t, "the result held back", 10*time.Second, func() bool { return ing.Stats().HeldResults >= 2 })
	if r, _ := e.st.GetRun(ctx, run); r.State == store.RunSucceeded {
		t.Fatal("the run succeeded with 5 of 10 samples stored")
	}
	tel, err := e.st.GetRunTelemetry(ctx, run, e.run.Token)
	if err != nil || !tel.Reported || tel.SamplesSent != 10 || tel.SamplesStored != 5 {
		t.Fatalf("telemetry accounting %+v, %v", tel, err)
	}
	publish(t, e, sub, batch(e.run, 1, 5))
	waitFor(t, "the run succeeded once complete", 10*time.Second, func() bool {
		r, _ := e.st.GetRun(ctx, run)
		return r.State == store.RunSucceeded
	})
}

// TestIngestIncompleteTelemetryFailsAsInfrastructure: past TelemetryWait
// the attempt ends as an infrastructure failure (requeued while attempts
// remain) whose error gives both counts, never as green.
func TestIngestIncompleteTelemetryFailsAsInfrastructure(t *testing.T) {
	ctx := context.Background()
	e := setup(t)
	run := e.run.Run.ID
	publish(t, e, protocol.DeviceTelemetrySubject("dev-1", run), batch(e.run, 0, 5))
	startIngest(t, e, ingest.Config{TelemetryWait: 500 * time.Millisecond})
	publish(t, e, protocol.DeviceResultSubject("dev-1", run), &protocol.Result{RunID: run, Token: e.run.Token, DeviceID: "dev-1",
		Outcome: protocol.OutcomeSucceeded, TelemetryBatches: 2, TelemetrySamples: 10,
		Configs: []protocol.ConfigResult{{ConfigIndex: 0, ConfigKey: "resident", Valid: true, DecodeTPS: protocol.Stat{N: 1, Mean: 10}}}})
	var r *store.Run
	waitFor(t, "the attempt ended", 10*time.Second, func() bool {
		r, _ = e.st.GetRun(ctx, run)
		return r.State == store.RunQueued || store.TerminalState(r.State)
	})
	if (r.State != store.RunQueued && r.State != store.RunInfraFailed) || !strings.Contains(r.Error, "telemetry incomplete: 5 of 10 samples stored") {
		t.Fatalf("run %s (%q); want an infrastructure failure naming both counts", r.State, r.Error)
	}
}
