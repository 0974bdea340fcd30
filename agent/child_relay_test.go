//go:build unix

package agent

import (
	"bufio"
	"bytes"
	"context"
	"log/slog"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/agent/telemetry"
	"github.com/lesfarm/lesfarm/jobs"
	"github.com/lesfarm/lesfarm/protocol"
	"github.com/lesfarm/lesfarm/runtime/trace"
)

// childSpec is a small job on the synthetic model of writeKillModel: the
// resident baseline, on-demand streaming and lookahead, one warm-up and
// two measured repetitions.
func childSpec(t testing.TB, modelSHA string) *jobs.Spec {
	t.Helper()
	spec := &jobs.Spec{Name: "child", Model: jobs.Model{Name: "kill-moe-f16.gguf", SHA256: modelSHA, Layout: jobs.LayoutAsIs},
		Prompts:      jobs.Prompts{Inline: []string{"In the beginning God created the heaven and the earth.", "And the earth was without form"}},
		DecodeTokens: 8, Warmup: 1, Repetitions: 2,
		Matrix: jobs.Matrix{Modes: []jobs.Mode{jobs.ModeResident, jobs.ModeOnDemand, jobs.ModeLookahead}, Budgets: []jobs.Budget{{Fraction: 0.5}}}}
	if raceEnabled {
		spec.DecodeTokens, spec.Prompts.Inline = 3, spec.Prompts.Inline[:1]
	}
	spec.Normalize()
	return spec
}

// op is one call the runner made on a Job's Sink or Position, copied.
type op struct {
	pos      bool
	cfg, rep int
	layer    *trace.LayerEvent
	token    *trace.TokenEvent
}

// recorder records a run's Sink and Position calls in order.
type recorder struct {
	mu  sync.Mutex
	ops []op
}

func (r *recorder) Layer(ev *trace.LayerEvent) {
	c := *ev
	c.Selected, c.Predicted, c.Missed = slices.Clone(ev.Selected), slices.Clone(ev.Predicted), slices.Clone(ev.Missed)
	r.mu.Lock()
	r.ops = append(r.ops, op{layer: &c})
	r.mu.Unlock()
}
func (r *recorder) Token(ev *trace.TokenEvent) {
	c := *ev
	r.mu.Lock()
	r.ops = append(r.ops, op{token: &c})
	r.mu.Unlock()
}
func (r *recorder) Read(*trace.ReadEvent) {}
func (r *recorder) position(cfg, rep int) {
	r.mu.Lock()
	r.ops = append(r.ops, op{pos: true, cfg: cfg, rep: rep})
	r.mu.Unlock()
}

// normalized is the op with empty expert lists as nil (the protocol does
// not tell them apart, nor does any sink).
func (o op) normalized() op {
	if o.layer != nil {
		c := *o.layer
		for _, s := range []*[]int{&c.Selected, &c.Predicted, &c.Missed} {
			if len(*s) == 0 {
				*s = nil
			}
		}
		o.layer = &c
	}
	return o
}

// collector gathers an aggregator's batches without their send times.
func collector() (*telemetry.Aggregator, func() []*protocol.TelemetryBatch) {
	var mu sync.Mutex
	var out []*protocol.TelemetryBatch
	agg := telemetry.NewAggregator(telemetry.AggregatorConfig{RunID: 1, Token: 1, DeviceID: "d", FlushEvery: time.Hour, MaxEvents: 64, ExpertEvery: 16,
		Emit: func(b *protocol.TelemetryBatch) {
			b.SentAt = time.Time{}
			mu.Lock()
			out = append(out, b)
			mu.Unlock()
		}})
	return agg, func() []*protocol.TelemetryBatch {
		agg.Close()
		mu.Lock()
		defer mu.Unlock()
		return out
	}
}

// TestRunnerLinesRelayTheRuntimesEvents: the events of a real run, written
// as runner lines by the child's sink and relayed by the supervisor, are
// the runtime's events again, and the telemetry aggregator makes the same
// batches of them as of the originals.
func TestRunnerLinesRelayTheRuntimesEvents(t *testing.T) {
	t.Parallel()
	path, sha, _ := writeKillModel(t)
	spec := childSpec(t, sha)
	rec := &recorder{}
	r := &Runner{Threads: 1, Gate: ThermalGate{Disabled: true}, Logger: slog.New(slog.DiscardHandler)}
	if _, err := r.Run(context.Background(), &Job{Spec: spec, Configs: spec.Expand(), ModelPath: path, Sink: rec, Position: rec.position}); err != nil {
		t.Fatal(err)
	}
	var predicted, missed bool
	for _, o := range rec.ops {
		predicted = predicted || (o.layer != nil && len(o.layer.Predicted) > 0)
		missed = missed || (o.layer != nil && len(o.layer.Missed) > 0)
	}
	if !predicted || !missed {
		t.Fatalf("the run has no predicted (%v) or missed (%v) experts: the test covers too little", predicted, missed)
	}

	// The child's side: the events as lines.
	var out bytes.Buffer
	w := newRunnerWriter(&out, func(err error) { t.Error(err) })
	direct, batchesDirect := collector()
	for _, o := range rec.ops {
		switch {
		case o.pos:
			direct.SetPosition(o.cfg, o.rep)
			if err := w.write(&protocol.RunnerLine{T: protocol.RunnerPos, Config: o.cfg, Rep: o.rep}); err != nil {
				t.Fatal(err)
			}
		case o.layer != nil:
			ev := *o.layer
			direct.Layer(&ev)
			w.Layer(&ev)
		default:
			ev := *o.token
			direct.Token(&ev)
			w.Token(&ev)
		}
	}

	if err := w.flush(); err != nil {
		t.Fatal(err)
	}

	// The agent's side: parse and relay into a recorder and an aggregator.
	again := &recorder{}
	relayed, batchesRelayed := collector()
	sc := bufio.NewScanner(&out)
	sc.Buffer(nil, protocol.MaxRunnerLineBytes+1)
	var l protocol.RunnerLine
	var lines, stepBytes, steps int
	for sc.Scan() {
		lines++
		if err := protocol.ParseRunnerLine(sc.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
		switch l.T {
		case protocol.RunnerPos:
			again.position(l.Config, l.Rep)
			relayed.SetPosition(l.Config, l.Rep)
		case protocol.RunnerStep:
			steps++
			stepBytes += len(sc.Bytes()) + 1
			relayStep(again, l.Step)
			relayStep(relayed, l.Step)
		default:
			t.Fatalf("unexpected %s line", l.T)
		}
	}
	if len(again.ops) != len(rec.ops) {
		t.Fatalf("%d events relayed from %d lines, %d recorded", len(again.ops), lines, len(rec.ops))
	}
	for i := range rec.ops {
		if want, got := rec.ops[i].normalized(), again.ops[i].normalized(); !reflect.DeepEqual(got, want) {
			t.Fatalf("event %d relayed as %+v %+v, want %+v %+v", i, got.layer, got.token, want.layer, want.token)
		}
	}
	bd, br := batchesDirect(), batchesRelayed()
	if len(bd) == 0 || !reflect.DeepEqual(br, bd) {
		t.Fatalf("relayed telemetry differs: %d batches vs %d direct", len(br), len(bd))
	}
	t.Logf("%d events -> %d lines (%d step lines, %.0f bytes each on average) -> %d identical telemetry batches",
		len(rec.ops), lines, steps, float64(stepBytes)/float64(steps), len(bd))
}

// TestRunChildMatchesEmbedded runs one job with the embedded runtime and
// through the runner protocol (this test binary as the child, ServeRunner
// as `lesfarm runner` runs it): the same configs, the same tokens, and
// telemetry of the same shape; where nothing is timing-dependent
// (resident and on-demand reads), the same layer counts too.
func TestRunChildMatchesEmbedded(t *testing.T) {
	t.Parallel()
	path, sha, _ := writeKillModel(t)
	spec := childSpec(t, sha)
	compareChildAndEmbedded(t, fakeRunnerExe(t, "serve"), path, spec)
}

// compareChildAndEmbedded runs spec on the model at path embedded and
// with exe as the runner child, and compares the two.
func compareChildAndEmbedded(t *testing.T, exe, path string, spec *jobs.Spec) {
	t.Helper()
	r := &Runner{Threads: 1, Gate: ThermalGate{Disabled: true}, WorkDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler)}
	run := func(child bool) ([]protocol.ConfigResult, []*protocol.TelemetryBatch, []string) {
		agg, batches := collector()
		var configs []string
		job := &Job{Spec: spec, Configs: spec.Expand(), ModelPath: path, Sink: agg, Position: agg.SetPosition,
			OnConfig: func(i int, c jobs.Config) { configs = append(configs, c.Key) }}
		var res []protocol.ConfigResult
		var err error
		if child {
			var info *ChildInfo
			res, info, err = r.RunChild(context.Background(), exe, job, ChildLimits{Timeout: 5 * time.Minute})
			if info != nil && info.Protocol != protocol.RunnerProtocolVersion {
				t.Errorf("child's hello: %+v", info)
			}
			if err != nil && info != nil {
				t.Logf("child's stderr:\n%s", info.StderrTail)
			}
		} else {
			res, err = r.Run(context.Background(), job)
		}
		if err != nil {
			t.Fatal(err)
		}
		return res, batches(), configs
	}
	embRes, embTel, embCfgs := run(false)
	chRes, chTel, chCfgs := run(true)
	if !slices.Equal(embCfgs, chCfgs) || len(embRes) != len(chRes) {
		t.Fatalf("configs: embedded %v (%d results), child %v (%d results)", embCfgs, len(embRes), chCfgs, len(chRes))
	}
	for i := range embRes {
		e, c := embRes[i], chRes[i]
		if e.Error != "" || c.Error != "" || !e.Valid || !c.Valid {
			t.Fatalf("config %s: embedded %+v, child %+v", e.ConfigKey, e, c)
		}
		if e.ConfigKey != c.ConfigKey || e.TokensSHA256 == "" || e.TokensSHA256 != c.TokensSHA256 {
			t.Errorf("config %s: tokens %s embedded, %s %s in the child", e.ConfigKey, e.TokensSHA256, c.ConfigKey, c.TokensSHA256)
		}
		if e.DecodeTPS.N != c.DecodeTPS.N || e.Repetitions != c.Repetitions {
			t.Errorf("config %s: %d/%d repetitions embedded, %d/%d in the child", e.ConfigKey, e.Repetitions, e.DecodeTPS.N, c.Repetitions, c.DecodeTPS.N)
		}
	}
	es, cs := samples(embTel), samples(chTel)
	if len(es) == 0 || len(es) != len(cs) {
		t.Fatalf("%d telemetry samples embedded, %d in the child", len(es), len(cs))
	}
	for i := range es {
		e, c := es[i], cs[i]
		deterministic := spec.Expand()[e.ConfigIndex].Mode != jobs.ModeLookahead
		if e.ConfigIndex != c.ConfigIndex || e.Repetition != c.Repetition || e.Phase != c.Phase || e.Step != c.Step || e.Pos != c.Pos || e.Tokens != c.Tokens ||
			(deterministic && (!reflect.DeepEqual(e.Layers, c.Layers) || e.BytesRead != c.BytesRead)) {
			t.Fatalf("sample %d: embedded %+v %+v, child %+v %+v", i, e, e.Layers, c, c.Layers)
		}
	}
}

// samples are the samples of batches in order.
func samples(batches []*protocol.TelemetryBatch) []protocol.Sample {
	var out []protocol.Sample
	for _, b := range batches {
		out = append(out, b.Samples...)
	}
	return out
}

// BenchmarkRunnerStepLine measures the per-token cost of the runner
// protocol on a step of 24 layers (8 experts selected, 8 predicted and 2
// missed per layer): the child writing it (layer and token events into a
// step line) and the agent reading it (parsing and validating it), beside
// what the telemetry aggregator costs either way.
//
//	go test -run '^$' -bench RunnerStepLine ./agent/
func BenchmarkRunnerStepLine(b *testing.B) {
	const layers = 24
	evs := make([]trace.LayerEvent, layers)
	for i := range evs {
		evs[i] = trace.LayerEvent{Layer: i, Hits: 6, Misses: 2, PrefetchUsed: 5, PrefetchWasted: 3, Compute: 41 * time.Microsecond, Stall: 3 * time.Microsecond,
			Selected: []int{1, 4, 9, 17, 33, 40, 51, 60}, Predicted: []int{1, 4, 9, 17, 20, 33, 51, 62}, Missed: []int{40, 60}}
	}
	tok := trace.TokenEvent{Step: 100, Phase: trace.Decode, Pos: 132, Tokens: 1, Duration: 1234567 * time.Nanosecond, Stall: 80 * time.Microsecond, BytesRead: 1 << 20, CacheBytes: 64 << 20}
	var buf bytes.Buffer
	w := newRunnerWriter(&buf, nil)
	write := func() {
		buf.Reset()
		for i := range evs {
			w.Layer(&evs[i])
		}
		w.Token(&tok)
		w.flush()
	}
	b.Run("write", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			write()
		}
		b.SetBytes(int64(buf.Len()))
	})
	write()
	line := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	agg := telemetry.NewAggregator(telemetry.AggregatorConfig{RunID: 1, Token: 1, DeviceID: "bench", Emit: func(*protocol.TelemetryBatch) {}})
	defer agg.Close()
	var l protocol.RunnerLine
	b.Run("read", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(line)))
		for b.Loop() {
			if err := protocol.ParseRunnerLine(line, &l); err != nil {
				b.Fatal(err)
			}
		}
	})
	// What the aggregator costs the agent either way (embedded, it is
	// handed the events directly).
	b.Run("aggregate", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			relayStep(agg, l.Step)
		}
	})
}
