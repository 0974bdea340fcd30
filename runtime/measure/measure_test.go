package measure

import (
	"context"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/runtime/expert"
	"github.com/lesfarm/lesfarm/runtime/gguf"
	"github.com/lesfarm/lesfarm/runtime/les"
	"github.com/lesfarm/lesfarm/runtime/trace"
	"github.com/lesfarm/lesfarm/runtime/units"
)

// fixture is the repo-owned golden Q4_K_M model (4 layers, top-4 of 8
// experts, all MoE).
const fixture = "../model/testdata/tiny-qwen3moe-q4_k_m.gguf"

// phone is a slow-flash device that declares its compute, so a streamed
// config of the fixture runs on its clock and stalls.
var phone = &expert.Profile{Name: "test-phone", Bandwidth: 200e6, Latency: 200 * time.Microsecond, MaxInFlight: 4,
	Compute: &expert.Compute{WeightBandwidth: 20e9, Throughput: 1e12}}

// TestClockRule pins the one rule that picks a config's clock.
func TestClockRule(t *testing.T) {
	t.Parallel()
	flashOnly := &expert.Profile{Name: "flash-only", Bandwidth: 1e9, Latency: time.Microsecond, MaxInFlight: 4}
	for _, tc := range []struct {
		name string
		c    Config
		want bool
		err  string
	}{
		{"auto, compute profile", Config{Profile: phone}, true, ""},
		{"auto, flash-only profile", Config{Profile: flashOnly}, false, ""},
		{"auto, direct", Config{Direct: true}, false, ""},
		{"auto, resident", Config{Resident: true, Profile: phone}, false, ""},
		{"host", Config{Profile: phone, Time: TimeHost}, false, ""},
		{"device", Config{Profile: phone, Time: TimeDevice}, true, ""},
		{"device, flash-only", Config{Profile: flashOnly, Time: TimeDevice}, false, "profile flash-only has none"},
		{"device, direct", Config{Direct: true, Time: TimeDevice}, false, "direct storage has none"},
		{"bad", Config{Time: "wall"}, false, "not supported"},
	} {
		got, err := tc.c.DeviceTime()
		if got != tc.want || (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s: DeviceTime() = %v, %v; want %v, %q", tc.name, got, err, tc.want, tc.err)
		}
	}
	if _, err := ParseTime("device"); err != nil {
		t.Fatal(err)
	}
	if _, err := ParseTime("wall"); err == nil {
		t.Fatal("ParseTime(wall) accepted")
	}
}

// steps collects the decode and prefill steps' times a sink is told.
type steps struct {
	trace.Sink
	dur, stall time.Duration
	n          int
	prefill    time.Duration
}

func (s *steps) Token(ev *trace.TokenEvent) {
	switch ev.Phase {
	case trace.Decode:
		s.dur += ev.Duration
		s.stall += ev.Stall
		s.n++
	case trace.Prefill:
		s.prefill += ev.Duration
	}
}
func (s *steps) Layer(*trace.LayerEvent) {}
func (s *steps) Read(*trace.ReadEvent)   {}

// TestTimelineOnResultClock: on the device clock, the per-step times a
// sink sees (the drill-down's "where decode time went") sum to the
// result's decode time and stall, so their split is the result's
// StallFraction; the tokens are the resident run's.
func TestTimelineOnResultClock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	run := func(c Config, sink trace.Sink) (*les.Result, []les.Rep) {
		t.Helper()
		c.Model, c.Threads = fixture, 1
		s, err := Open(c)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		prompt := s.Tok.Tokenize("The quick brown fox", true, false)
		p := les.Plan{Repetitions: 1, RepParams: les.RepParams{Prompts: [][]int{prompt}, MaxTokens: 12}}
		p.Sink = sink
		res, reps, err := s.Run(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		return res, reps
	}
	_, ref := run(Config{Resident: true}, nil)
	sink := &steps{}
	res, reps := run(Config{Mode: expert.Scheduled, Budget: units.Budget{Fraction: 0.25}, Profile: phone}, sink)
	if !res.DeviceTime || !reps[0].DeviceTime {
		t.Fatal("a profile with compute did not run on the device clock")
	}
	if !slices.Equal(reps[0].Tokens[0], ref[0].Tokens[0]) {
		t.Fatalf("tokens %v, resident %v", reps[0].Tokens[0], ref[0].Tokens[0])
	}
	if sink.n != reps[0].DecodeTokens || sink.dur != reps[0].Decode || sink.stall != reps[0].Expert.DeviceStall {
		t.Fatalf("steps: %d tokens, %v with %v stall; result: %d tokens, %v with %v device stall",
			sink.n, sink.dur, sink.stall, reps[0].DecodeTokens, reps[0].Decode, reps[0].Expert.DeviceStall)
	}
	share := sink.stall.Seconds() / sink.dur.Seconds()
	if math.Abs(share-res.StallFraction) > 1e-12 || share <= 0 {
		t.Fatalf("timeline stall share %v, result StallFraction %v", share, res.StallFraction)
	}
}

// TestPrefillOnDeviceClock: on the device clock, prefill and TTFT are the
// device's too, not the host's wall time: on a device whose compute reads
// weights at 1 MB/s, a prompt's prefill takes at least its weights' read
// at that rate (the host's takes a fraction of it), TTFT is that prefill
// time, the prefill steps a sink sees sum to it, and two runs agree
// whatever the host did meanwhile.
func TestPrefillOnDeviceClock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	slow := &expert.Profile{Name: "slow-phone", Bandwidth: 200e6, Latency: 200 * time.Microsecond, MaxInFlight: 4,
		Compute: &expert.Compute{WeightBandwidth: 1e6, Throughput: 1e11}}
	run := func(mode expert.Mode) (les.Rep, *les.Result, time.Duration, int64) {
		t.Helper()
		s, err := Open(Config{Model: fixture, Threads: 1, Mode: mode, Budget: units.Budget{Fraction: 0.25}, Profile: slow})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		f, err := gguf.Open(fixture)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		var gap int64
		for _, g := range expert.CostsFromGGUF(f, 4).Gap {
			gap += g.Bytes
		}
		prompt := s.Tok.Tokenize("The quick brown fox jumps over the lazy dog", true, false)
		sink := &steps{}
		p := les.Plan{Repetitions: 1, RepParams: les.RepParams{Prompts: [][]int{prompt}, MaxTokens: 4}}
		p.Sink = sink
		res, reps, err := s.Run(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		return reps[0], res, sink.prefill, gap
	}
	for _, mode := range []expert.Mode{expert.OnDemand, expert.Scheduled} {
		r, res, steps, gap := run(mode)
		floor := time.Duration(float64(gap) / 1e6 * float64(time.Second))
		if !r.DeviceTime || gap <= 0 || r.Prefill < floor {
			t.Fatalf("%s: device time %v, prefill %v (host %v), want at least the %d non-expert weight bytes at 1 MB/s, %v",
				mode, r.DeviceTime, r.Prefill, r.HostPrefill, gap, floor)
		}
		if r.TTFT != r.Prefill || steps != r.Prefill {
			t.Fatalf("%s: TTFT %v, prefill steps %v, prefill %v: want all three equal", mode, r.TTFT, steps, r.Prefill)
		}
		if want := float64(r.PromptTokens) / r.Prefill.Seconds(); res.PrefillTPS.Median != want {
			t.Fatalf("%s: prefill tok/s %v, want %v", mode, res.PrefillTPS.Median, want)
		}
		again, _, _, _ := run(mode)
		if d := math.Abs(again.Prefill.Seconds()/r.Prefill.Seconds() - 1); d > 0.01 {
			t.Fatalf("%s: prefill %v then %v on the device clock", mode, r.Prefill, again.Prefill)
		}
	}
}
