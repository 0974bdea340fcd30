package agent

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/agent/telemetry"
	"github.com/lesfarm/lesfarm/internal/fixture"
	"github.com/lesfarm/lesfarm/jobs"
	"github.com/lesfarm/lesfarm/profile"
	"github.com/lesfarm/lesfarm/protocol"
	"github.com/lesfarm/lesfarm/runtime/trace"
)

// trainedModel returns the trained fixture model, skipping loudly when the
// shared fixtures are not there.
func trainedModel(t testing.TB) string {
	t.Helper()
	p := filepath.Join(fixture.SharedDir(), "trained", "tiny-moe-kjv-f16.gguf")
	if _, err := os.Stat(p); err != nil {
		fixture.Missing(t, p, err, "the agent's runtime tests")
	}
	return p
}

func smokeSpec(t testing.TB) *jobs.Spec {
	t.Helper()
	s, err := jobs.Builtin("smoke")
	if err != nil {
		t.Fatal(err)
	}
	if raceEnabled {
		s.Prompts = jobs.Prompts{Inline: []string{"In the beginning God created"}}
		s.PrefillTokens, s.DecodeTokens = 2, 2
	}
	return s
}

func TestRunnerSmokeSuite(t *testing.T) {
	path := trainedModel(t)
	spec := smokeSpec(t)
	spec.Repetitions = 2
	spec.Warmup = 1
	var batches []*protocol.TelemetryBatch
	agg := telemetry.NewAggregator(telemetry.AggregatorConfig{RunID: 1, Token: 1, DeviceID: "d", FlushEvery: time.Hour, MaxEvents: 64,
		Emit: func(b *protocol.TelemetryBatch) { batches = append(batches, b) }})
	r := &Runner{Threads: 1, Gate: ThermalGate{Disabled: true}}
	res, err := r.Run(context.Background(), &Job{Spec: spec, Configs: spec.Expand(), ModelPath: path, Sink: agg, Position: agg.SetPosition})
	agg.Close()
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != len(spec.Expand()) {
		t.Fatalf("%d results", len(res))
	}
	for _, c := range res {
		if c.Error != "" || !c.Valid || c.DecodeTPS.N != 2 || c.DecodeTPS.Mean <= 0 || c.PrefillTPS.Mean <= 0 || c.TTFTMS.Mean <= 0 {
			t.Fatalf("config %s: %+v", c.ConfigKey, c)
		}
		t.Logf("%s: decode %.1f tok/s, prefill %.1f tok/s, hit rate %.2f, bytes/token %.0f", c.ConfigKey, c.DecodeTPS.Mean, c.PrefillTPS.Mean, c.HitRate, c.BytesPerToken)
	}
	od := res[1]
	if !strings.HasPrefix(od.ConfigKey, "on-demand") || (!raceEnabled && (od.HitRate >= 1 || od.BytesPerToken <= 0)) {
		t.Errorf("on-demand config did not stream experts: %+v", od)
	}
	// Telemetry: warm-up and measured samples with layer detail, for both configs.
	reps := map[int]bool{}
	cfgs := map[int]bool{}
	for _, b := range batches {
		for _, s := range b.Samples {
			reps[s.Repetition] = true
			cfgs[s.ConfigIndex] = true
			if s.Layers == nil {
				t.Fatal("sample without layer counts")
			}
		}
	}
	if !reps[-1] || !reps[0] || !reps[1] || !cfgs[0] || !cfgs[1] {
		t.Errorf("telemetry covers reps %v configs %v", reps, cfgs)
	}
}

func TestRunnerIsolatesConfigFailures(t *testing.T) {
	path := trainedModel(t)
	spec := smokeSpec(t)
	spec.DecodeTokens = 4
	configs := spec.Expand()
	// A profile that does not exist fails only its config.
	configs[1].Profile = "no-such-profile"
	r := &Runner{Threads: 1, Gate: ThermalGate{Disabled: true}}
	res, err := r.Run(context.Background(), &Job{Spec: spec, Configs: configs, ModelPath: path})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Error != "" || !res[0].Valid {
		t.Errorf("healthy config failed: %+v", res[0])
	}
	if !strings.Contains(res[1].Error, "no-such-profile") {
		t.Errorf("failing config error = %q", res[1].Error)
	}
}

func TestThermalGate(t *testing.T) {
	hot, cool := 60.0, 40.0
	temps := []*float64{&hot, &hot, &cool}
	i := 0
	read := func() protocol.DeviceState {
		s := protocol.DeviceState{MaxTempC: temps[min(i, len(temps)-1)]}
		i++
		return s
	}
	r := &Runner{}
	waited, timedOut, err := r.waitThermal(context.Background(), ThermalGate{MaxTempC: 45, Timeout: time.Second, Poll: time.Millisecond}, read)
	if err != nil || timedOut || waited <= 0 || i != 3 {
		t.Fatalf("waited %v timedOut %v err %v reads %d", waited, timedOut, err, i)
	}
	_, timedOut, _ = r.waitThermal(context.Background(), ThermalGate{MaxTempC: 45, Timeout: 5 * time.Millisecond, Poll: time.Millisecond},
		func() protocol.DeviceState { return protocol.DeviceState{MaxTempC: &hot} })
	if !timedOut {
		t.Fatal("gate did not time out on a hot device")
	}
	// No readable zone: passes at once.
	_, timedOut, _ = r.waitThermal(context.Background(), ThermalGate{}, func() protocol.DeviceState { return protocol.DeviceState{} })
	if timedOut {
		t.Fatal("gate blocked a device without thermal zones")
	}
}

func TestRunnerPacksWhenAsked(t *testing.T) {
	path := trainedModel(t)
	spec := smokeSpec(t)
	spec.Model.Layout = jobs.LayoutPacked
	spec.Matrix = jobs.Matrix{Modes: []jobs.Mode{jobs.ModeOnDemand}, Budgets: spec.Matrix.Budgets}
	spec.DecodeTokens = 4
	work := t.TempDir()
	r := &Runner{Threads: 1, Gate: ThermalGate{Disabled: true}, WorkDir: work}
	res, err := r.Run(context.Background(), &Job{Spec: spec, Configs: spec.Expand(), ModelPath: path})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 || res[0].Error != "" || !res[0].Valid {
		t.Fatalf("packed run: %+v", res)
	}
	packed := filepath.Join(work, "packed", spec.Model.SHA256+".gguf")
	if _, err := os.Stat(packed); err != nil {
		t.Fatalf("no packed model: %v", err)
	}
	// Without a work dir a packed layout cannot be honoured: the config fails clearly.
	res, _ = (&Runner{Threads: 1, Gate: ThermalGate{Disabled: true}}).Run(context.Background(), &Job{Spec: spec, Configs: spec.Expand(), ModelPath: path})
	if !strings.Contains(res[0].Error, "work dir") {
		t.Fatalf("error %q", res[0].Error)
	}
}

// TestRunnerDeviceTime: an emulated device whose profile declares its
// compute reports decode in device time, with the dilation and the
// compute time per token on host and device in the result's metrics; the
// decode steps streamed as telemetry (the run page's "where decode time
// went") split their time as the result's stall fraction does.
func TestRunnerDeviceTime(t *testing.T) {
	path := trainedModel(t)
	spec := smokeSpec(t)
	spec.Repetitions, spec.Warmup = 1, 0
	prof, err := profile.Load("phone-flagship-2025")
	if err != nil {
		t.Fatal(err)
	}
	r := &Runner{Threads: 1, Gate: ThermalGate{Disabled: true}, Profile: prof}
	sink := &decodeSplit{}
	res, err := r.Run(context.Background(), &Job{Spec: spec, Configs: spec.Expand(), ModelPath: path, Sink: sink,
		Position: func(ci, _ int) { sink.config = ci }})
	if err != nil {
		t.Fatal(err)
	}
	streamed := 0
	for _, c := range res {
		if c.Error != "" || !c.Valid {
			t.Fatalf("config %s: %+v", c.ConfigKey, c)
		}
		if c.HitRate >= 1 { // resident: no store, host time
			continue
		}
		streamed++
		if c.Extra["device_time"] != 1 || c.Extra["dilation"] <= 0 || c.Extra["device_compute_ms_per_token"] <= 0 || c.Extra["host_compute_ms_per_token"] <= 0 || c.DecodeTPS.Mean <= 0 {
			t.Fatalf("config %s: no device-time metrics: %+v", c.ConfigKey, c.Extra)
		}
		d := sink.split[c.ConfigIndex]
		if share := d[1].Seconds() / d[0].Seconds(); math.Abs(share-c.StallFraction) > 1e-9 {
			t.Fatalf("config %s: telemetry's decode steps stall %v of %v (%.4f), result's stall fraction %.4f", c.ConfigKey, d[1], d[0], share, c.StallFraction)
		}
	}
	if streamed == 0 {
		t.Fatal("no config streamed experts")
	}
}

// decodeSplit sums each config's decode steps' time and stall.
type decodeSplit struct {
	config int
	split  map[int][2]time.Duration
}

func (d *decodeSplit) Token(ev *trace.TokenEvent) {
	if ev.Phase != trace.Decode {
		return
	}
	if d.split == nil {
		d.split = map[int][2]time.Duration{}
	}
	x := d.split[d.config]
	d.split[d.config] = [2]time.Duration{x[0] + ev.Duration, x[1] + ev.Stall}
}
func (d *decodeSplit) Layer(*trace.LayerEvent) {}
func (d *decodeSplit) Read(*trace.ReadEvent)   {}
