package expert

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/runtime/moe"
	"github.com/lesfarm/lesfarm/runtime/trace"
)

type readSink func(*trace.ReadEvent)

func (f readSink) Token(*trace.TokenEvent)  {}
func (f readSink) Layer(*trace.LayerEvent)  {}
func (f readSink) Read(ev *trace.ReadEvent) { f(ev) }

// TestThrottleEmulatesBandwidthAndLatency checks the emulated device's
// lower bounds exactly and its upper bounds loosely (timers on a loaded
// machine run late); it does not run in parallel with other tests.
func TestThrottleEmulatesBandwidthAndLatency(t *testing.T) {
	m := newTestModel(t, 1, 32, 64, 64, true) // 48 KiB experts, 1.5 MiB total
	p := &Profile{Name: "slow", Bandwidth: 50 << 20, Latency: 2 * time.Millisecond, MaxInFlight: 8}
	var times []time.Duration
	for _, tc := range []struct {
		mode     Mode
		min, max time.Duration
	}{
		// 32 reads one at a time: 32 × (2 ms + 0.94 ms) ≈ 94 ms.
		{OnDemand, 85 * time.Millisecond, 400 * time.Millisecond},
		// In parallel the latency overlaps: 1.5 MiB / 50 MiB/s ≈ 30 ms.
		{OnDemandParallel, 29 * time.Millisecond, 200 * time.Millisecond},
	} {
		s, err := New(m.path, m.layout, m.shapes, Options{Mode: tc.mode, Budget: 1 << 30, Profile: p})
		if err != nil {
			t.Fatal(err)
		}
		all := make([]int, 32)
		for i := range all {
			all[i] = i
		}
		start := time.Now()
		if err := s.Use(context.Background(), 0, all, func(int, moe.Weights) error { return nil }); err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		s.Close()
		if took < tc.min || took > tc.max {
			t.Errorf("%s took %v, want %v..%v", tc.mode, took, tc.min, tc.max)
		}
		times = append(times, took)
	}
	if times[1] > times[0]*2/3 {
		t.Errorf("parallel reads took %v, serial %v: latency does not overlap", times[1], times[0])
	}
}

func TestTelemetryFill(t *testing.T) {
	t.Parallel()
	m := newTestModel(t, 2, 8, 16, 16, true)
	specDone := make(chan int, 8)
	sink := readSink(func(ev *trace.ReadEvent) {
		if ev.Speculative {
			specDone <- ev.Expert
		}
	})
	s, err := New(m.path, m.layout, m.shapes, Options{Mode: Lookahead, Budget: 1 << 20, Sink: sink})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ok := func(int, moe.Weights) error { return nil }
	ctx := context.Background()
	s.Use(ctx, 0, []int{1, 2}, ok)
	s.Prefetch(1, []int{3, 4})
	// Both prefetches complete (their read events come after the entries
	// are resident) before layer 1 demands 3 and 5.
	for range 2 {
		select {
		case <-specDone:
		case <-time.After(10 * time.Second):
			t.Fatal("prefetches of layer 1 did not complete")
		}
	}
	s.Use(ctx, 1, []int{3, 5}, ok)
	var lev trace.LayerEvent
	lev.Layer = 1
	s.FillLayerEvent(&lev)
	if lev.Hits != 1 || lev.Misses != 1 || lev.PrefetchUsed != 1 || lev.PrefetchWasted != 1 {
		t.Fatalf("layer event %+v", lev)
	}
	// Expert 3 was prefetched (a hit), expert 5 was not: the one miss.
	if !slices.Equal(lev.Missed, []int{5}) {
		t.Fatalf("missed %v, want [5]", lev.Missed)
	}
	lev.Layer = 0
	s.FillLayerEvent(&lev)
	if !slices.Equal(lev.Missed, []int{1, 2}) || lev.Misses != 2 {
		t.Fatalf("layer 0: missed %v (%d misses), want [1 2] on a cold cache", lev.Missed, lev.Misses)
	}
	var tev trace.TokenEvent
	s.FillTokenEvent(&tev)
	if tev.BytesRead != 5*m.expertBytes() || tev.CacheBytes != 5*m.expertBytes() {
		t.Fatalf("token event %+v, expert %d bytes", tev, m.expertBytes())
	}
	s.FillTokenEvent(&tev)
	if tev.BytesRead != 0 {
		t.Fatal("token counters not reset")
	}
	st := s.Meter().Stats()
	pr := st.PredLayers[1]
	if pr.Precision() != 0.5 || pr.Recall() != 0.5 {
		t.Fatalf("prediction %+v", pr)
	}
}

func BenchmarkTelemetry(b *testing.B) {
	m := newTestModel(b, 2, 8, 16, 16, true)
	s, err := New(m.path, m.layout, m.shapes, Options{Mode: Scheduled, Budget: 1 << 20})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	var lev trace.LayerEvent
	var tev trace.TokenEvent
	b.ReportAllocs()
	for b.Loop() {
		lev.Layer = 1
		s.FillLayerEvent(&lev)
		s.FillTokenEvent(&tev)
	}
}

func BenchmarkUseResident(b *testing.B) {
	m := newTestModel(b, 2, 16, 16, 16, true)
	s, err := New(m.path, m.layout, m.shapes, Options{Mode: Scheduled, Budget: 1 << 20})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ok := func(int, moe.Weights) error { return nil }
	ex := []int{1, 3, 5, 7, 9, 11, 13, 15}
	s.Use(context.Background(), 0, ex, ok)
	b.ReportAllocs()
	for b.Loop() {
		s.Prefetch(1, ex)
		s.Use(context.Background(), 0, ex, ok)
	}
}
