package les

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/runtime/expert"
	"github.com/lesfarm/lesfarm/runtime/units"
)

// fixture is the repo-owned golden Q4_K_M model (4 layers, top-4 of 8
// experts, all MoE).
const fixture = "../model/testdata/tiny-qwen3moe-q4_k_m.gguf"

// TestMeasureDefinitions pins each metric's phase and formula on hand-made
// repetitions.
func TestMeasureDefinitions(t *testing.T) {
	t.Parallel()
	dec := expert.Stats{Demanded: 80, Hits: 60, BytesRead: 4000, Stall: 250 * time.Millisecond,
		PredLayers: []expert.PredStats{{Correct: 30, Predicted: 40, Demanded: 60}}}
	pre := expert.Stats{Demanded: 500, Hits: 10, BytesRead: 100000, Stall: time.Second}
	reps := []Rep{
		{Prompts: 2, PromptTokens: 20, Prefill: 100 * time.Millisecond, TTFT: 300 * time.Millisecond, DecodeTokens: 10, Decode: time.Second, HostDecode: time.Second, Expert: dec, PrefillExpert: pre},
		{Prompts: 2, PromptTokens: 20, Prefill: 200 * time.Millisecond, TTFT: 500 * time.Millisecond, DecodeTokens: 10, Decode: 500 * time.Millisecond, HostDecode: 500 * time.Millisecond, Expert: dec, PrefillExpert: pre},
	}
	r := Measure(reps, MeasureOptions{Warmup: 1})
	near := func(name string, got, want float64) {
		t.Helper()
		if d := got - want; d > 1e-9 || d < -1e-9 {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	near("decode tok/s mean", r.DecodeTPS.Mean, (10+20)/2.0)
	near("prefill tok/s mean", r.PrefillTPS.Mean, (200+100)/2.0)
	near("ttft ms mean", r.TTFTMS.Mean, (150+250)/2.0)
	near("hit rate (decode only)", r.HitRate, 120.0/160)
	near("precision", r.PredictorPrecision, 60.0/80)
	near("recall", r.PredictorRecall, 60.0/120)
	near("stall fraction (decode stall over decode time)", r.StallFraction, 0.5/1.5)
	near("bytes per token (decode reads over decode tokens)", r.BytesPerToken, 8000.0/20)
	near("prefill bytes per token", r.PrefillBytesPerToken, 200000.0/40)
	if r.Repetitions != 2 || r.Warmup != 1 || r.DecodeTPS.N != 2 || r.DecodeTokens != 20 || r.DecodeTPS.CV == 0 {
		t.Errorf("counts: %+v", r)
	}
	if got := Measure(reps, MeasureOptions{Resident: true}).HitRate; got != 1 {
		t.Errorf("resident hit rate %v, want 1", got)
	}
	// Device time: the device's stall over the device's decode time.
	dt := []Rep{{Prompts: 1, DecodeTokens: 4, Decode: 2 * time.Second, HostDecode: 9 * time.Second, DeviceTime: true,
		Expert: expert.Stats{Stall: 5 * time.Second, DeviceStall: 500 * time.Millisecond, HostCompute: 3 * time.Second, DeviceCompute: 1500 * time.Millisecond}}}
	d := Measure(dt, MeasureOptions{})
	near("device decode tok/s", d.DecodeTPS.Mean, 2)
	near("device stall fraction", d.StallFraction, 0.25)
	near("dilation", d.Dilation, 2)
	near("device compute ms/token", d.DeviceComputeMSPerToken, 375)
	near("host compute ms/token", d.HostComputeMSPerToken, 750)
	// Stall is capped at the phase's time.
	over := []Rep{{Prompts: 1, DecodeTokens: 1, Decode: time.Second, Expert: expert.Stats{Stall: 3 * time.Second}}}
	near("capped stall", Measure(over, MeasureOptions{}).StallFraction, 1)
}

func TestMeasureDiscardOutliers(t *testing.T) {
	t.Parallel()
	var reps []Rep
	for _, ms := range []int{100, 101, 99, 100, 250} { // 10 tokens each; the last is slow
		reps = append(reps, Rep{Prompts: 1, DecodeTokens: 10, Decode: time.Duration(ms) * time.Millisecond,
			Expert: expert.Stats{BytesRead: 1000, Demanded: 10, Hits: 5}})
	}
	reps[4].Expert.BytesRead = 9000 // the outlier's counters leave with it
	all := Measure(reps, MeasureOptions{})
	kept := Measure(reps, MeasureOptions{DiscardOutliers: true})
	if all.Discarded != 0 || all.Repetitions != 5 || kept.Discarded != 1 || kept.Repetitions != 4 || kept.DecodeTPS.N != 4 {
		t.Fatalf("all %d/%d, kept %d/%d", all.Repetitions, all.Discarded, kept.Repetitions, kept.Discarded)
	}
	if kept.DecodeTPS.Min < 95 || kept.BytesPerToken != 100 || kept.DecodeTPS.CV >= all.DecodeTPS.CV {
		t.Fatalf("kept figures still carry the outlier: %+v", kept.DecodeTPS)
	}
}

// TestSessionPhases runs the fixture through a streaming session: the
// tokens equal the all-resident session's, and the store's counters split
// into prefill and decode
// (decode steps × layers × top-k demands; prefill the rest).
func TestSessionPhases(t *testing.T) {
	ctx := context.Background()
	res, err := Open(Config{Model: fixture, Resident: true, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer res.Close()
	prompts := [][]int{{464, 2068, 1379, 675, 277, 1140}, {1, 2, 3}}
	p := RepParams{Prompts: prompts, MaxTokens: 8}
	want, err := res.Repetition(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(want.Tokens[0], []int{3292, 2685, 2499, 3370, 258, 1002, 944, 3791}) {
		t.Fatalf("resident tokens %v differ from the golden greedy output", want.Tokens[0])
	}
	m := res.Model
	var layers, topK int
	for _, l := range m.Layers {
		if l.Router != nil {
			layers++
			topK = m.ExpertsUsed
		}
	}
	for _, mode := range []expert.Mode{expert.OnDemand, expert.Lookahead, expert.Scheduled} {
		s, err := Open(Config{Model: fixture, Mode: mode, Budget: units.Budget{Fraction: 0.3}, Threads: 1})
		if err != nil {
			t.Fatal(err)
		}
		r, _, err := s.Run(ctx, Plan{RepParams: p, Warmup: 1, Repetitions: 2})
		if err != nil {
			t.Fatal(err)
		}
		_, reps, _ := s.Run(ctx, Plan{RepParams: p, Repetitions: 1})
		s.Close()
		got := reps[0]
		if !slices.Equal(got.Tokens[0], want.Tokens[0]) || !slices.Equal(got.Tokens[1], want.Tokens[1]) {
			t.Fatalf("%s: tokens %v, want %v", mode, got.Tokens, want.Tokens)
		}
		if got.DecodeTokens != 14 || got.PromptTokens != 9 || got.Prompts != 2 {
			t.Fatalf("%s: counts %+v", mode, got)
		}
		// A batched prefill demands each layer's union of the positions'
		// experts, so at most prompt tokens × layers × top-k.
		if d, p := got.Expert.Demanded, got.PrefillExpert.Demanded; d != int64(14*layers*topK) || p < int64(len(prompts)*layers*topK) || p > int64(9*layers*topK) {
			t.Fatalf("%s: demanded decode %d (want %d), prefill %d (want %d..%d)", mode, d, 14*layers*topK, p, len(prompts)*layers*topK, 9*layers*topK)
		}
		if r.Repetitions != 2 || r.Warmup != 1 || r.DecodeTokens != 28 || r.HitRate <= 0 || r.HitRate >= 1 || r.BytesPerToken <= 0 || r.PeakRSSBytes <= 0 {
			t.Fatalf("%s: result %+v", mode, r)
		}
		if mode == expert.Lookahead && (r.PredictorRecall <= 0 || r.PredictorPrecision <= 0) {
			t.Fatalf("lookahead: precision %v recall %v", r.PredictorPrecision, r.PredictorRecall)
		}
	}
	if _, err := Open(Config{Model: fixture, Mode: expert.OnDemand}); err == nil {
		t.Fatal("a streaming session without a budget opened")
	}
}

func TestPin(t *testing.T) {
	cpu := DefaultPinCPU()
	if cpu < 0 {
		t.Skip("no CPU set readable here")
	}
	done := make(chan error, 1)
	go func() {
		unpin, err := Pin(cpu)
		if err != nil {
			done <- err
			return
		}
		if got := PinnedCPU(); got != cpu {
			unpin()
			done <- errorf("pinned to %d, want %d", got, cpu)
			return
		}
		unpin()
		done <- nil
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := Pin(100000); err == nil {
		t.Fatal("pinned to a CPU that does not exist")
	}
}

func errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }
