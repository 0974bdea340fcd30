package telemetry

import (
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/protocol"
	"github.com/lesfarm/lesfarm/runtime/trace"
)

// moeStep sends one step of a layers-layer model: layer l selects experts
// (step+l+k·31) mod experts for k < topK, plus the hot expert l%experts
// (so the hot expert is demanded every step), and misses every selected
// expert whose id is odd.
func moeStep(a *Aggregator, i, layers, experts, topK int, phase trace.Phase) {
	for l := range layers {
		set := map[int]bool{l % experts: true}
		for k := range topK - 1 {
			set[(i+l+k*31)%experts] = true
		}
		var sel, missed []int
		for e := range experts {
			if set[e] {
				sel = append(sel, e)
				if e%2 == 1 {
					missed = append(missed, e)
				}
			}
		}
		a.Layer(&trace.LayerEvent{Step: i, Layer: l, Selected: sel, Missed: missed, Hits: len(sel) - len(missed), Misses: len(missed)})
	}
	a.Token(&trace.TokenEvent{Step: i, Phase: phase, Tokens: 1, Duration: time.Millisecond})
}

// TestAggregatorExpertCounts drives a 40-layer, 256-expert, top-8 model
// through a warm-up, a prefill and measured decode steps of two configs,
// and checks the per-expert counts: only measured decode steps count, the
// hot experts are demanded every step, each layer's demand minus miss is
// the samples' hits and its miss their misses, and batches carry the
// counts every ExpertEvery steps, at the config change and at Close.
func TestAggregatorExpertCounts(t *testing.T) {
	const layers, experts, topK, steps = 40, 256, 8, 300
	var c collector
	a := NewAggregator(AggregatorConfig{RunID: 1, Token: 1, DeviceID: "d", FlushEvery: time.Hour, MaxEvents: 64, ExpertEvery: 128, Emit: c.emit})
	for cfg := range 2 {
		a.SetPosition(cfg, -1) // warm-up: not counted
		for i := range 10 {
			moeStep(a, i, layers, experts, topK, trace.Decode)
		}
		a.SetPosition(cfg, 0)
		moeStep(a, 0, layers, experts, topK, trace.Prefill) // not counted
		for i := range steps {
			moeStep(a, i+1, layers, experts, topK, trace.Decode)
		}
	}
	a.Close()
	type key struct{ cfg, layer, expert int }
	demand, miss := map[key]int{}, map[key]int{}
	stepsOf := map[[2]int]int{}
	hits, misses := map[[2]int]int{}, map[[2]int]int{}
	carriers := 0
	for _, b := range c.get() {
		if err := b.Validate(); err != nil {
			t.Fatalf("batch %d invalid: %v", b.Seq, err)
		}
		if len(b.Experts) > 0 {
			carriers++
		}
		for _, r := range b.Experts {
			stepsOf[[2]int{r.ConfigIndex, r.Layer}] += r.Steps
			for i, e := range r.Experts {
				demand[key{r.ConfigIndex, r.Layer, int(e)}] += int(r.Demand[i])
				miss[key{r.ConfigIndex, r.Layer, int(e)}] += int(r.Miss[i])
			}
		}
		for _, s := range b.Samples {
			if s.Repetition < 0 || s.Phase != protocol.PhaseDecode {
				continue
			}
			for l := range s.Layers.Hits {
				hits[[2]int{s.ConfigIndex, l}] += int(s.Layers.Hits[l])
				misses[[2]int{s.ConfigIndex, l}] += int(s.Layers.Misses[l])
			}
		}
	}
	// 300 steps at 128 per carry: 2 full carries and the rest at the
	// config change (config 0) or at Close (config 1).
	if carriers != 6 {
		t.Errorf("%d batches carried expert counts, want 6", carriers)
	}
	for cfg := range 2 {
		for l := range layers {
			k := [2]int{cfg, l}
			if stepsOf[k] != steps {
				t.Fatalf("cfg %d layer %d: %d steps counted, want %d", cfg, l, stepsOf[k], steps)
			}
			if got := demand[key{cfg, l, l % experts}]; got != steps {
				t.Fatalf("cfg %d layer %d: hot expert demanded %d times, want %d", cfg, l, got, steps)
			}
			var d, m int
			for e := range experts {
				d += demand[key{cfg, l, e}]
				m += miss[key{cfg, l, e}]
				if e%2 == 0 && miss[key{cfg, l, e}] != 0 {
					t.Fatalf("even expert %d missed", e)
				}
			}
			if d-m != hits[k] || m != misses[k] {
				t.Fatalf("cfg %d layer %d: demand-miss %d, miss %d; the samples say hits %d, misses %d", cfg, l, d-m, m, hits[k], misses[k])
			}
		}
	}
}

func BenchmarkAggregatorExpertStep(b *testing.B) {
	a := NewAggregator(AggregatorConfig{RunID: 1, Token: 1, DeviceID: "d", FlushEvery: time.Hour, Emit: func(*protocol.TelemetryBatch) {}})
	a.SetPosition(0, 0)
	sel, missed := []int{3, 17, 40, 99, 120, 200, 201, 255}, []int{17, 201}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		for l := range 40 {
			a.Layer(&trace.LayerEvent{Step: i, Layer: l, Selected: sel, Missed: missed, Hits: 6, Misses: 2})
		}
		a.Token(&trace.TokenEvent{Step: i, Phase: trace.Decode, Tokens: 1})
		i++
	}
}
