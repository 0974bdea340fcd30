package bench

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/lesfarm/lesfarm/profile"
	"github.com/lesfarm/lesfarm/runtime/expert"
	"github.com/lesfarm/lesfarm/runtime/model"
	"github.com/lesfarm/lesfarm/runtime/tensor"
	"github.com/lesfarm/lesfarm/runtime/units"
)

// hostIndependenceProfile emulates a device whose compute and flash take
// comparable time per token on the test model, so both the scheduling and
// the dilation matter.
const hostIndependenceProfile = `name: test-device
bandwidth: 3.5GB/s
latency: 40us
max_in_flight: 16
page_size: 4KiB
read_ahead: 64KiB
compute:
  weight_bandwidth: 5GB/s
  throughput: 1TFLOP/s
`

// TestHostIndependence is the device-time guarantee: the same profile's
// ratios (scheduled ÷ on-demand, scheduled ÷ oracle, naive ÷ on-demand),
// measured in device time with the host's compute slowed by busy work of
// 1.5× and 2× per segment, agree within 10% with the unslowed run. (The
// dilation recorded moves with the slowdown and with the machine's load.)
func TestHostIndependence(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the host-independence ladder takes about a minute")
	}
	c := model.SynthConfig{Layers: 4, Experts: 32, ExpertsUsed: 4, Hidden: 256, ExpertFFN: 256, Heads: 4, KVHeads: 2, Vocab: 512, Context: 128, Type: tensor.Q4_K, Seed: 11}
	p := writeSynth(t, c)
	prof, err := profile.Parse([]byte(hostIndependenceProfile))
	if err != nil {
		t.Fatal(err)
	}
	type ratios struct{ schedOnDemand, schedOracle, naiveOnDemand float64 }
	run := func(slow float64) ratios {
		rep, err := RunLadder(context.Background(), LadderConfig{
			Model: p, Profile: prof, Budget: units.Budget{Fraction: 0.25}, Threads: 1, Repetitions: 3, Warmup: 1, PromptTokens: 4, GenTokens: 24,
			Modes: []expert.Mode{expert.Naive, expert.OnDemand, expert.Scheduled}, DeviceTime: true, ComputeSlowdown: slow,
		})
		if err != nil {
			t.Fatal(err)
		}
		if rep.TimeBase != "device" || rep.Oracle == nil {
			t.Fatalf("report %+v", rep)
		}
		for _, r := range rep.Rows {
			if !r.IdenticalOutput || r.Dilation <= 0 || r.DeviceComputeMSPerToken <= 0 {
				t.Fatalf("slowdown %v: row %+v", slow, r)
			}
		}
		nv, od, sc := rep.Rows[0], rep.Rows[1], rep.Rows[2]
		t.Logf("slowdown %.1f: naive %.1f, on-demand %.1f, scheduled %.1f, oracle %.1f tok/s (device); dilation %.2f, host compute %.2f ms/token, device %.3f ms/token",
			slow, nv.DecodeTokensPerSecond, od.DecodeTokensPerSecond, sc.DecodeTokensPerSecond, rep.Oracle.DecodeTokensPerSecond, od.Dilation, od.HostComputeMSPerToken, od.DeviceComputeMSPerToken)
		return ratios{sc.DecodeTokensPerSecond / od.DecodeTokensPerSecond, sc.DecodeTokensPerSecond / rep.Oracle.DecodeTokensPerSecond, nv.DecodeTokensPerSecond / od.DecodeTokensPerSecond}
	}
	base := run(1)
	for _, slow := range []float64{2, 1.5} {
		got := run(slow)
		for _, x := range []struct {
			name     string
			got, ref float64
		}{
			{"scheduled ÷ on-demand", got.schedOnDemand, base.schedOnDemand},
			{"scheduled ÷ oracle", got.schedOracle, base.schedOracle},
			{"naive ÷ on-demand", got.naiveOnDemand, base.naiveOnDemand},
		} {
			if d := math.Abs(x.got/x.ref - 1); d > 0.10 {
				t.Errorf("slowdown %.1f: %s %.3f vs %.3f unslowed (%.0f%% apart, limit 10%%)", slow, x.name, x.got, x.ref, 100*d)
			}
		}
	}
}

// TestDeviceTimeBadInput: device time needs a compute section; the
// slowdown hook is bounded.
func TestDeviceTimeBadInput(t *testing.T) {
	p := writeSynth(t, model.SynthConfig{Layers: 1, Experts: 4, ExpertsUsed: 2, Hidden: 64, ExpertFFN: 64, Heads: 2, Vocab: 300, Context: 64, Type: tensor.F32})
	noCompute, _ := profile.Parse([]byte("name: flash-only\nbandwidth: 1GB/s\nlatency: 10us\nmax_in_flight: 4\n"))
	for _, tc := range []struct {
		cfg  LadderConfig
		want string
	}{
		{LadderConfig{Model: p, Profile: noCompute, Budget: units.Budget{Fraction: 0.5}, DeviceTime: true}, "flash-only has none"},
		{LadderConfig{Model: p, Direct: true, Budget: units.Budget{Fraction: 0.5}, DeviceTime: true}, "direct storage has none"},
		{LadderConfig{Model: p, Profile: noCompute, Budget: units.Budget{Fraction: 0.5}, ComputeSlowdown: 1000}, "slowdown"},
	} {
		_, err := RunLadder(context.Background(), tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("err = %v, want one line mentioning %q", err, tc.want)
		}
	}
}
