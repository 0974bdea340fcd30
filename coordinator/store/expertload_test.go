package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/agent/telemetry"
	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/protocol"
	"github.com/lesfarm/lesfarm/runtime/trace"
)

// TestExpertLoadRowsPerRun streams a run of a 40-layer, 256-expert, top-8
// model through the agent's aggregator into the store: a 5-config ladder,
// one warm-up and 3 measured repetitions of 2,000 decode tokens each. The
// table holds layers × Σ_configs ceil(measured decode steps / 1024) =
// 40 × 5 × ceil(6000/1024) = 1,200 rows (docs/metrics.md), their totals
// are exactly what the aggregator was fed, a redelivery stores nothing
// twice, and a requeue deletes the lost attempt's rows and device trace.
func TestExpertLoadRowsPerRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := open(t)
	addDevice(t, st, "dev-x", nil)
	spec := smoke(t)
	spec.Retry.MaxAttempts = 2
	if _, _, err := st.CreateRuns(ctx, &store.CreateRunsParams{Spec: spec}); err != nil {
		t.Fatal(err)
	}
	g := claim(t, st, "dev-x")
	const layers, experts, topK, configs, reps, tokens = 40, 256, 8, 5, 3, 2000
	var batches []*protocol.TelemetryBatch
	agg := telemetry.NewAggregator(telemetry.AggregatorConfig{RunID: g.Run.ID, Token: g.Token, DeviceID: "dev-x", FlushEvery: time.Hour,
		Emit: func(b *protocol.TelemetryBatch) { batches = append(batches, b) }})
	// Expert (c + l + 7) % 256 of layer l is hot in config c: demanded every
	// step, missed on the first only.
	var wantDemand, wantMiss [configs][layers][experts]int64
	sel, missed := make([]int, 0, topK), make([]int, 0, topK)
	for c := range configs {
		for rep := -1; rep < reps; rep++ {
			agg.SetPosition(c, rep)
			for i := range tokens {
				for l := range layers {
					hot := (c + l + 7) % experts
					sel, missed = sel[:0], missed[:0]
					for k := range topK {
						e := (hot + k*(1+(i+l)%31)) % experts
						sel = append(sel, e)
						if (e != hot && (i+e)%3 == 0) || (e == hot && i == 0 && rep == 0) {
							missed = append(missed, e)
						}
					}
					if rep >= 0 {
						for _, e := range sel {
							wantDemand[c][l][e]++
						}
						for _, e := range missed {
							wantMiss[c][l][e]++
						}
					}
					agg.Layer(&trace.LayerEvent{Step: i, Layer: l, Selected: sel, Missed: missed, Hits: len(sel) - len(missed), Misses: len(missed)})
				}
				agg.Token(&trace.TokenEvent{Step: i, Phase: trace.Decode, Tokens: 1, Duration: time.Millisecond})
			}
		}
	}
	agg.Close()
	ins, err := st.InsertTelemetry(ctx, batches)
	if err != nil {
		t.Fatal(err)
	}
	const wantRows = layers * configs * ((reps*tokens + telemetry.DefaultExpertEvery - 1) / telemetry.DefaultExpertEvery)
	if n, err := st.CountExpertLoadRows(ctx, g.Run.ID); err != nil || n != wantRows || ins.ExpertRows != wantRows {
		t.Fatalf("%d expert_load rows (%d inserted, err %v), want %d", n, ins.ExpertRows, err, wantRows)
	}
	var bytes int64
	if err := st.Pool().QueryRow(ctx, `SELECT sum(length(counts)) FROM expert_load WHERE run_id = $1`, g.Run.ID).Scan(&bytes); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d rows, %d bytes of counts (%.1f KB a row)", wantRows, bytes, float64(bytes)/wantRows/1000)
	// A redelivery (the same batches again) adds nothing.
	if again, err := st.InsertTelemetry(ctx, batches); err != nil || again.ExpertRows != 0 {
		t.Fatalf("redelivery stored %v rows (err %v)", again, err)
	}
	for c := range configs {
		load, err := st.ExpertLoad(ctx, g.Run.ID, c)
		if err != nil {
			t.Fatal(err)
		}
		if len(load) != layers {
			t.Fatalf("config %d: %d layers", c, len(load))
		}
		for l, ly := range load {
			if ly.Layer != l || ly.Steps != reps*tokens {
				t.Fatalf("config %d layer %d: layer %d, %d steps", c, l, ly.Layer, ly.Steps)
			}
			for e := range experts {
				var d, m int64
				if e < len(ly.Demand) {
					d, m = ly.Demand[e], ly.Miss[e]
				}
				if d != wantDemand[c][l][e] || m != wantMiss[c][l][e] {
					t.Fatalf("config %d layer %d expert %d: demand %d miss %d, want %d %d", c, l, e, d, m, wantDemand[c][l][e], wantMiss[c][l][e])
				}
			}
			if hot := (c + l + 7) % experts; ly.Demand[hot] != reps*tokens || ly.Miss[hot] != 1 {
				t.Fatalf("config %d layer %d: hot expert %d demand %d miss %d", c, l, hot, ly.Demand[hot], ly.Miss[hot])
			}
		}
	}
	// A device-state sample for the run, then the device is lost: the
	// requeue deletes the attempt's expert counts and trace.
	temp := 41.5
	if err := st.RecordDeviceState(ctx, []int64{g.Run.ID}, &protocol.DeviceState{MaxTempC: &temp}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Pool().Exec(ctx, `UPDATE devices SET last_seen_at = now() - interval '1 minute' WHERE id = 'dev-x'`); err != nil {
		t.Fatal(err)
	}
	if lost, _, err := st.MarkDeviceLost(ctx, "dev-x", 0); err != nil || !lost {
		t.Fatalf("lost %v %v", lost, err)
	}
	n, _ := st.CountExpertLoadRows(ctx, g.Run.ID)
	_, traced, _ := st.DeviceTrace(ctx, g.Run.ID, 10)
	if n != 0 || traced != 0 {
		t.Fatalf("after the requeue: %d expert rows, %d device states", n, traced)
	}
}

// TestDeviceTraceDownsamples stores 50 heartbeats' states and reads them
// back whole and in 5 buckets of exact averages; a state with no reading
// stores nothing.
func TestDeviceTraceDownsamples(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := open(t)
	addDevice(t, st, "dev-t", nil)
	if _, _, err := st.CreateRuns(ctx, &store.CreateRunsParams{Spec: smoke(t)}); err != nil {
		t.Fatal(err)
	}
	g := claim(t, st, "dev-t")
	if err := st.RecordDeviceState(ctx, []int64{g.Run.ID}, &protocol.DeviceState{Thermal: nil}); err != nil {
		t.Fatal(err)
	}
	if _, n, _ := st.DeviceTrace(ctx, g.Run.ID, 10); n != 0 {
		t.Fatalf("an empty state stored %d samples", n)
	}
	for i := range 50 {
		temp, batt, charging := 30+float64(i), 100-float64(i)/2, i >= 40
		if err := st.RecordDeviceState(ctx, []int64{g.Run.ID}, &protocol.DeviceState{MaxTempC: &temp, BatteryPercent: &batt, Charging: &charging}); err != nil {
			t.Fatal(err)
		}
	}
	pts, n, err := st.DeviceTrace(ctx, g.Run.ID, 5)
	if err != nil || n != 50 || len(pts) != 5 {
		t.Fatalf("%d points of %d samples, err %v", len(pts), n, err)
	}
	for b, p := range pts {
		wantT := 30 + float64(b*10) + 4.5
		if p.Samples != 10 || p.MaxTempC == nil || *p.MaxTempC != wantT || p.BatteryPercent == nil || *p.BatteryPercent != 100-wantT/2+15 || *p.Charging != (b == 4) {
			t.Fatalf("bucket %d: %+v (temp %v), want 10 samples averaging %.1f °C", b, p, *p.MaxTempC, wantT)
		}
	}
	if all, _, _ := st.DeviceTrace(ctx, g.Run.ID, 600); len(all) != 50 {
		t.Fatalf("%d points, want every sample", len(all))
	}
}
