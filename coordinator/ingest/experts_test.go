package ingest_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/ingest"
	"github.com/lesfarm/lesfarm/protocol"
)

// TestIngestExpertLoad publishes batches carrying per-expert counts, one
// of them twice, and two whose counts are bad (a miss above its demand;
// an oversized message): the good counts are stored once, and the bad
// messages are rejected, counted and never stored.
func TestIngestExpertLoad(t *testing.T) {
	ctx := context.Background()
	e := setup(t)
	subject := protocol.TelemetrySubject(e.run.Run.ID)
	for s := range 4 {
		b := batch(e.run, uint64(s), 8)
		for l := range 6 {
			b.Experts = append(b.Experts, protocol.ExpertLoad{ConfigIndex: 1, Layer: l, Steps: 8,
				Experts: []int32{int32(l), 100}, Demand: []int32{8, 2}, Miss: []int32{1, 2}})
		}
		publish(t, e, subject, b)
		if s == 2 {
			publish(t, e, subject, b)
		}
	}
	bad := batch(e.run, 10, 2)
	bad.V = protocol.Version
	bad.Experts = []protocol.ExpertLoad{{ConfigIndex: 1, Layer: 0, Steps: 2, Experts: []int32{3}, Demand: []int32{1}, Miss: []int32{2}}}
	data, err := json.Marshal(bad) // Encode would refuse it
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.js.Publish(ctx, subject, data); err != nil {
		t.Fatal(err)
	}
	// Oversized: within NATS' 1 MiB but over the protocol's telemetry limit.
	big := batch(e.run, 11, 1)
	big.V = protocol.Version
	for l := range 27 { // 27 × 4096 entries of 3 varints, about 1.03 MB
		row := protocol.ExpertLoad{ConfigIndex: 1, Layer: l, Steps: 1 << 20}
		for x := range protocol.MaxExpertsPerLayer {
			row.Experts, row.Demand, row.Miss = append(row.Experts, int32(x)), append(row.Demand, 1<<20), append(row.Miss, 1<<19)
		}
		big.Experts = append(big.Experts, row)
	}
	if data, err = json.Marshal(big); err != nil {
		t.Fatal(err)
	}
	if len(data) <= protocol.MaxTelemetryBytes || len(data) >= 1<<20 {
		t.Fatalf("oversized batch is %d bytes; want between %d and 1 MiB", len(data), protocol.MaxTelemetryBytes)
	}
	if _, err := e.js.Publish(ctx, subject, data); err != nil {
		t.Fatal(err)
	}
	ing, err := ingest.New(ingest.Config{JS: e.js, Store: e.st, FetchMessages: 16})
	if err != nil {
		t.Fatal(err)
	}
	if err := ing.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "counts stored and junk rejected", 20*time.Second, func() bool {
		n, _ := e.st.CountExpertLoadRows(ctx, e.run.Run.ID)
		return n == 4*6 && ing.Stats().Rejected == 2
	})
	if err := ing.Stop(); err != nil {
		t.Fatal(err)
	}
	snap := ing.Rejects().Snapshot()
	if snap[protocol.RejectKey{Type: "telemetry", Kind: protocol.RejectInvalid}] != 1 || snap[protocol.RejectKey{Type: "telemetry", Kind: protocol.RejectOversized}] != 1 {
		t.Fatalf("rejects %s, want one invalid and one oversized", ing.Rejects())
	}
	load, err := e.st.ExpertLoad(ctx, e.run.Run.ID, 1)
	if err != nil || len(load) != 6 {
		t.Fatalf("%d layers, err %v", len(load), err)
	}
	for l, ly := range load {
		if ly.Steps != 32 || ly.Demand[l] != 32 || ly.Miss[l] != 4 || ly.Demand[100] != 8 || ly.Miss[100] != 8 {
			t.Fatalf("layer %d: %d steps, expert %d %d/%d, expert 100 %d/%d", l, ly.Steps, l, ly.Demand[l], ly.Miss[l], ly.Demand[100], ly.Miss[100])
		}
	}
	if n, _ := e.st.CountSamples(ctx, e.run.Run.ID); n != 4*8 {
		t.Fatalf("%d samples, want the 32 of the good batches", n)
	}
}
