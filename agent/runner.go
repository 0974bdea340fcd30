package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lesfarm/lesfarm/agent/device"
	"github.com/lesfarm/lesfarm/jobs"
	"github.com/lesfarm/lesfarm/profile"
	"github.com/lesfarm/lesfarm/protocol"
	"github.com/lesfarm/lesfarm/runtime/expert"
	"github.com/lesfarm/lesfarm/runtime/generate"
	"github.com/lesfarm/lesfarm/runtime/gguf"
	"github.com/lesfarm/lesfarm/runtime/model"
	"github.com/lesfarm/lesfarm/runtime/moe"
	"github.com/lesfarm/lesfarm/runtime/pack"
	speculative "github.com/lesfarm/lesfarm/runtime/spec"
	"github.com/lesfarm/lesfarm/runtime/tokenizer"
	"github.com/lesfarm/lesfarm/runtime/trace"
)

// ThermalGate holds a repetition back until the device has cooled down.
// The zero value gates at 45 °C with a 2-minute timeout, polling every 2 s.
type ThermalGate struct {
	// MaxTempC is the hottest a readable thermal zone may be at the start
	// of a repetition.
	MaxTempC float64
	// Timeout bounds the wait; a repetition that starts after a timeout
	// is measured but flagged in the result.
	Timeout time.Duration
	// Poll is the interval between readings.
	Poll time.Duration
	// Disabled turns the gate off (readings are still recorded).
	Disabled bool
}

func (g ThermalGate) withDefaults() ThermalGate {
	g.MaxTempC = cmp.Or(g.MaxTempC, 45)
	g.Timeout = cmp.Or(g.Timeout, 2*time.Minute)
	g.Poll = cmp.Or(g.Poll, 2*time.Second)
	return g
}

// Runner executes a job's configs with the embedded LES runtime. It holds
// no state between jobs; it is not safe for concurrent Runs (a device runs
// one benchmark at a time, or the measurements would interfere).
type Runner struct {
	// Threads for matrix products; 0 means runtime.NumCPU().
	Threads int
	// Profile is the agent's own storage profile (host mode --profile); a
	// config's profile overrides it. Nil reads at the device's real speed.
	Profile *expert.Profile
	// Direct reads experts with O_DIRECT where supported.
	Direct bool
	// WorkDir holds packed copies of models; empty means no packing (a job
	// asking for a packed layout then fails its streaming configs).
	WorkDir string
	// Gate is the thermal gate applied before each repetition.
	Gate ThermalGate
	// ReadState reads the device's thermal state; nil means device.ReadState.
	ReadState func() protocol.DeviceState
	Logger    *slog.Logger
}

// Job is one run's work for the Runner.
type Job struct {
	Spec      *jobs.Spec
	Configs   []jobs.Config
	ModelPath string
	// Sink receives the runtime's trace events (the telemetry aggregator).
	Sink trace.Sink
	// Position is told which config and repetition runs next (may be nil).
	Position func(configIndex, repetition int)
	// OnConfig is called before each config starts (progress; may be nil).
	OnConfig func(i int, c jobs.Config)
}

// Run runs every config of job and returns one result per config. A config
// that fails records its error and the others still run. Run returns
// ctx's error (with the results so far) when cancelled.
func (r *Runner) Run(ctx context.Context, job *Job) ([]protocol.ConfigResult, error) {
	log := cmp.Or(r.Logger, slog.Default())
	out := make([]protocol.ConfigResult, 0, len(job.Configs))
	for i, c := range job.Configs {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		if job.OnConfig != nil {
			job.OnConfig(i, c)
		}
		log.InfoContext(ctx, "agent: config started", "config_index", c.Index, "config_key", c.Key)
		t0 := time.Now()
		res := r.runConfigSafe(ctx, job, c)
		if ctx.Err() != nil {
			return out, ctx.Err()
		}
		if res.Error != "" {
			log.WarnContext(ctx, "agent: config failed", "config_index", c.Index, "config_key", c.Key, "err", res.Error)
		} else {
			log.InfoContext(ctx, "agent: config done", "config_index", c.Index, "config_key", c.Key,
				"decode_tps", fmt.Sprintf("%.2f", res.DecodeTPS.Mean), "elapsed", time.Since(t0).Round(time.Millisecond).String())
		}
		out = append(out, res)
	}
	return out, nil
}

// runConfigSafe isolates one config: a panic in the runtime becomes the
// config's error instead of taking the agent down.
func (r *Runner) runConfigSafe(ctx context.Context, job *Job, c jobs.Config) (res protocol.ConfigResult) {
	res = protocol.ConfigResult{ConfigIndex: c.Index, ConfigKey: c.Key, Warmup: job.Spec.Warmup}
	defer func() {
		if p := recover(); p != nil {
			res = protocol.ConfigResult{ConfigIndex: c.Index, ConfigKey: c.Key, Warmup: job.Spec.Warmup,
				Error: clipText(fmt.Sprintf("runtime panic: %v", p))}
			cmp.Or(r.Logger, slog.Default()).Error("agent: config panicked", "config_key", c.Key, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
		}
	}()
	if err := r.runConfig(ctx, job, c, &res); err != nil {
		return protocol.ConfigResult{ConfigIndex: c.Index, ConfigKey: c.Key, Warmup: job.Spec.Warmup, Error: clipText(err.Error())}
	}
	return res
}

func clipText(s string) string {
	if len(s) > protocol.MaxTextLen {
		return s[:protocol.MaxTextLen-3] + "..."
	}
	return s
}

// ResolveProfile returns the storage profile of a config: its own, else the
// runner's.
func (r *Runner) ResolveProfile(c jobs.Config) (*expert.Profile, error) {
	if c.Profile != "" {
		return profile.Load(c.Profile)
	}
	return r.Profile, nil
}

type loaded struct {
	m           *model.Model
	store       *expert.Store
	tok         *tokenizer.Tokenizer
	expertBytes int64
	budget      int64
	spec        *speculative.Decoder // the speculative mode's decoder, made on first use
}

func (l *loaded) close() {
	if l.m != nil {
		l.m.Close()
	}
}

func (r *Runner) load(ctx context.Context, job *Job, c jobs.Config) (*loaded, error) {
	threads := cmp.Or(r.Threads, runtime.NumCPU())
	prof, err := r.ResolveProfile(c)
	if err != nil {
		return nil, err
	}
	l := &loaded{}
	opts := model.Options{Threads: threads}
	modelPath := job.ModelPath
	var refExperts int64 // mixed-precision: the budget is the original model's
	if c.Mode == jobs.ModeMixedPrecision {
		if modelPath, refExperts, err = r.mixed(ctx, job); err != nil {
			return nil, err
		}
	}
	if c.Mode != jobs.ModeResident {
		mode, err := runtimeMode(c.Mode)
		if err != nil {
			return nil, err
		}
		expertsPath := ""
		layout := job.Spec.Model.Layout
		if c.Mode == jobs.ModeMixedPrecision {
			layout = jobs.LayoutAsIs // the planned file is packed already when asked
		}
		switch layout {
		case jobs.LayoutPacked:
			if expertsPath, err = r.packed(ctx, job.ModelPath, job.Spec.Model.SHA256, pack.LayoutBlob); err != nil {
				return nil, err
			}
		case jobs.LayoutPackedCompat:
			// A compat file is a complete model (its expert FFN may be
			// padded), so it is loaded itself rather than as an experts
			// file beside the original.
			if p, err := r.packed(ctx, job.ModelPath, job.Spec.Model.SHA256, pack.LayoutCompat); err != nil {
				return nil, err
			} else if p != "" {
				modelPath = p
			}
		}
		opts.Experts = func(f *gguf.File, shapes []moe.LayerShape) (moe.Source, error) {
			for _, s := range shapes {
				l.expertBytes += s.Bytes() * int64(s.Experts)
			}
			if l.expertBytes == 0 {
				return nil, fmt.Errorf("mode %s needs a mixture-of-experts model; this model has no experts", c.Mode)
			}
			l.budget = c.Budget.Resolve(cmp.Or(refExperts, l.expertBytes))
			s, err := expert.Open(modelPath, f, shapes, expertsPath, expert.Options{
				Mode: mode, Budget: l.budget, Profile: prof, Direct: r.Direct, Logger: r.Logger,
				// A profile that declares its compute runs on device time.
				DeviceTime: prof != nil && prof.Compute != nil && !r.Direct,
			})
			l.store = s
			return s, err
		}
	}
	m, err := model.Load(modelPath, opts)
	if err != nil {
		if errors.Is(err, model.ErrUnsupported) {
			return nil, fmt.Errorf("unsupported model: %w", err)
		}
		return nil, err
	}
	l.m = m
	tok, err := tokenizer.FromGGUF(m.File)
	if err != nil {
		m.Close()
		return nil, fmt.Errorf("unsupported model: no usable tokenizer: %w", err)
	}
	l.tok = tok
	return l, nil
}

// packed returns the path of a packed copy of the model, packing it into
// WorkDir once. A model that is packed already is used as it is.
func (r *Runner) packed(ctx context.Context, modelPath, sha, layout string) (string, error) {
	f, err := gguf.Open(modelPath)
	if err != nil {
		return "", err
	}
	done := pack.IsPacked(f)
	if layout == pack.LayoutCompat {
		done = pack.IsCompat(f)
	}
	f.Close()
	if done {
		return "", nil
	}
	if r.WorkDir == "" {
		return "", errors.New("the job asks for a packed model but the agent has no work dir to pack into")
	}
	dir := filepath.Join(r.WorkDir, "packed")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	name := sha + ".gguf"
	if layout == pack.LayoutCompat {
		name = sha + ".compat.gguf"
	}
	out := filepath.Join(dir, name)
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	cmp.Or(r.Logger, slog.Default()).InfoContext(ctx, "agent: packing model", "sha256", sha, "layout", layout, "out", out)
	tmp := out + ".tmp"
	if err := pack.Pack(ctx, modelPath, tmp, pack.Options{Layout: layout}); err != nil {
		os.Remove(tmp)
		return "", err
	}
	return out, os.Rename(tmp, out)
}

// prompts tokenizes the job's prompts, truncated to PrefillTokens and to
// what fits the context with the decode tokens.
func prompts(spec *jobs.Spec, tok *tokenizer.Tokenizer, ctxLen int) ([][]int, error) {
	texts := spec.ResolvePrompts()
	if len(texts) == 0 {
		return nil, fmt.Errorf("no prompts (set %q unknown to this agent?)", spec.Prompts.Set)
	}
	limit := ctxLen - spec.DecodeTokens
	if limit < 1 {
		return nil, fmt.Errorf("decode_tokens %d leave no room for a prompt in the model's context of %d", spec.DecodeTokens, ctxLen)
	}
	out := make([][]int, 0, len(texts))
	for i, t := range texts {
		ids := tok.Tokenize(t, true, false)
		if spec.PrefillTokens > 0 && len(ids) > spec.PrefillTokens {
			ids = ids[:spec.PrefillTokens]
		}
		if len(ids) > limit {
			ids = ids[:limit]
		}
		if len(ids) == 0 {
			return nil, fmt.Errorf("prompt %d tokenizes to no tokens", i)
		}
		out = append(out, ids)
	}
	return out, nil
}

// repMeasure is what one repetition measured.
type repMeasure struct {
	decodeTPS, prefillTPS, ttftMS float64
	decode, prefill               time.Duration
	decodeTokens                  int
}

func (r *Runner) runConfig(ctx context.Context, job *Job, c jobs.Config, res *protocol.ConfigResult) error {
	spec := job.Spec
	freeMemory()
	resetPeakRSS()
	l, err := r.load(ctx, job, c)
	if err != nil {
		return err
	}
	defer l.close()
	ps, err := prompts(spec, l.tok, l.m.Context)
	if err != nil {
		return err
	}
	maxPrompt := 0
	for _, p := range ps {
		maxPrompt = max(maxPrompt, len(p))
	}
	st, err := l.m.NewState(min(maxPrompt+spec.DecodeTokens, l.m.Context))
	if err != nil {
		return err
	}
	gate := r.Gate.withDefaults()
	readState := r.ReadState
	if readState == nil {
		readState = func() protocol.DeviceState { return device.ReadState(device.Options{}) }
	}
	var (
		meas                       []repMeasure
		before                     expert.Stats
		tStart, tEnd, gateWait     []float64
		gateTimeouts, thermalReads int
	)
	for rep := -spec.Warmup; rep < spec.Repetitions; rep++ {
		if rep > -spec.Warmup && spec.Cooldown > 0 {
			if err := sleep(ctx, spec.Cooldown.D()); err != nil {
				return err
			}
		}
		waited, timedOut, err := r.waitThermal(ctx, gate, readState)
		if err != nil {
			return err
		}
		s0 := readState()
		if rep == 0 && l.store != nil {
			before = l.store.Stats()
		}
		if job.Position != nil {
			job.Position(c.Index, rep)
		}
		var m repMeasure
		var ttft time.Duration
		var dev0 time.Duration
		if l.store != nil {
			dev0 = l.store.Stats().DeviceTime()
		}
		for _, p := range ps {
			gr, err := r.decode(ctx, l, c, job, p, spec.DecodeTokens, st)
			if err != nil {
				return err
			}
			m.decode += gr.Decode
			m.prefill += gr.Prefill
			m.decodeTokens += gr.DecodeSteps
			ttft += gr.TTFT
			m.prefillTPS += float64(len(p))
		}
		s1 := readState()
		if rep < 0 {
			continue
		}
		if m.decode > 0 {
			m.decodeTPS = float64(m.decodeTokens) / m.decode.Seconds()
		}
		if l.store != nil && l.store.DeviceTime() {
			// Device time: decode as the emulated device would take it.
			if d := l.store.Stats().DeviceTime() - dev0; d > 0 {
				m.decodeTPS = float64(m.decodeTokens) / d.Seconds()
			}
		}
		if m.prefill > 0 {
			m.prefillTPS /= m.prefill.Seconds()
		} else {
			m.prefillTPS = 0
		}
		m.ttftMS = float64(ttft.Microseconds()) / 1000 / float64(len(ps))
		meas = append(meas, m)
		gateWait = append(gateWait, waited.Seconds())
		if timedOut {
			gateTimeouts++
		}
		if s0.MaxTempC != nil && s1.MaxTempC != nil {
			thermalReads++
			tStart = append(tStart, *s0.MaxTempC)
			tEnd = append(tEnd, *s1.MaxTempC)
		}
	}
	pick := func(f func(repMeasure) float64) []float64 {
		xs := make([]float64, len(meas))
		for i, m := range meas {
			xs[i] = f(m)
		}
		return xs
	}
	res.DecodeTPS = Summarize(pick(func(m repMeasure) float64 { return m.decodeTPS }))
	res.PrefillTPS = Summarize(pick(func(m repMeasure) float64 { return m.prefillTPS }))
	res.TTFTMS = Summarize(pick(func(m repMeasure) float64 { return m.ttftMS }))
	res.Repetitions = len(meas)
	res.PeakMemoryBytes = peakRSS()
	var decodeTokens int
	var busy time.Duration
	for _, m := range meas {
		decodeTokens += m.decodeTokens
		busy += m.decode + m.prefill
	}
	if l.store != nil {
		after := l.store.Stats()
		demanded := after.Demanded - before.Demanded
		if demanded > 0 {
			res.HitRate = float64(after.Hits-before.Hits) / float64(demanded)
		}
		var correct, pdem int64
		for i := range after.PredLayers {
			a := after.PredLayers[i]
			var b expert.PredStats
			if i < len(before.PredLayers) {
				b = before.PredLayers[i]
			}
			correct += a.Correct - b.Correct
			pdem += a.Demanded - b.Demanded
		}
		if pdem > 0 {
			res.PredictorRecall = float64(correct) / float64(pdem)
		}
		if busy > 0 {
			res.StallFraction = min(float64(after.Stall-before.Stall)/float64(busy), 1)
		}
		if dt := after.DeviceTime() - before.DeviceTime(); l.store.DeviceTime() && dt > 0 {
			res.StallFraction = min(float64(after.DeviceStall-before.DeviceStall)/float64(dt), 1)
		}
		if decodeTokens > 0 {
			res.BytesPerToken = float64(after.BytesRead-before.BytesRead) / float64(decodeTokens)
		}
	} else {
		res.HitRate = 1 // every expert is resident
	}
	res.Extra = map[string]float64{
		"prompts":                float64(len(ps)),
		"budget_bytes":           float64(l.budget),
		"expert_bytes":           float64(l.expertBytes),
		"thermal_gate_wait_s":    sum(gateWait),
		"thermal_gate_timeouts":  float64(gateTimeouts),
		"decode_tokens_measured": float64(decodeTokens),
	}
	if l.store != nil && l.store.DeviceTime() && decodeTokens > 0 {
		after := l.store.Stats()
		dh, dd := after.HostCompute-before.HostCompute, after.DeviceCompute-before.DeviceCompute
		res.Extra["device_time"] = 1
		res.Extra["host_compute_ms_per_token"] = dh.Seconds() * 1e3 / float64(decodeTokens)
		res.Extra["device_compute_ms_per_token"] = dd.Seconds() * 1e3 / float64(decodeTokens)
		if dd > 0 {
			res.Extra["dilation"] = dh.Seconds() / dd.Seconds()
		}
	}
	if thermalReads > 0 {
		res.Extra["thermal_start_c_mean"] = Summarize(tStart).Mean
		res.Extra["thermal_end_c_mean"] = Summarize(tEnd).Mean
		res.Extra["thermal_end_c_max"] = slices.Max(tEnd)
	}
	res.Valid = true
	switch {
	case len(meas) == 0:
		res.Valid, res.InvalidReason = false, "no measured repetitions"
	case gateTimeouts > 0:
		res.Valid, res.InvalidReason = false, fmt.Sprintf("thermal gate timed out before %d of %d repetitions (device above %.0f °C)", gateTimeouts, len(meas), gate.MaxTempC)
	case decodeTokens == 0:
		res.Valid, res.InvalidReason = false, "no tokens decoded"
	}
	return nil
}

// waitThermal waits until the hottest readable zone is under the gate's
// threshold, or the timeout passes. Devices with no readable zone pass
// at once.
func (r *Runner) waitThermal(ctx context.Context, g ThermalGate, read func() protocol.DeviceState) (waited time.Duration, timedOut bool, err error) {
	if g.Disabled {
		return 0, false, nil
	}
	t0 := time.Now()
	for {
		st := read()
		if st.MaxTempC == nil || *st.MaxTempC <= g.MaxTempC {
			return time.Since(t0), false, nil
		}
		if time.Since(t0) >= g.Timeout {
			cmp.Or(r.Logger, slog.Default()).WarnContext(ctx, "agent: thermal gate timed out", "max_temp_c", *st.MaxTempC, "threshold_c", g.MaxTempC)
			return time.Since(t0), true, nil
		}
		if err := sleep(ctx, g.Poll); err != nil {
			return time.Since(t0), false, err
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func sum(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s
}

// Summarize returns the statistics of xs (mean, median, sample stddev, CV,
// min, max). The zero Stat is returned for no values.
func Summarize(xs []float64) protocol.Stat {
	n := len(xs)
	if n == 0 {
		return protocol.Stat{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	st := protocol.Stat{N: n, Min: s[0], Max: s[n-1], Mean: sum(s) / float64(n)}
	if n%2 == 1 {
		st.Median = s[n/2]
	} else {
		st.Median = (s[n/2-1] + s[n/2]) / 2
	}
	if n > 1 {
		var v float64
		for _, x := range s {
			v += (x - st.Mean) * (x - st.Mean)
		}
		st.Stddev = math.Sqrt(v / float64(n-1))
	}
	if st.Mean != 0 {
		st.CV = st.Stddev / st.Mean
	}
	return st
}

func freeMemory() {
	runtime.GC()
	debug.FreeOSMemory()
}

// resetPeakRSS resets the kernel's peak RSS mark of this process (Linux and
// Android); elsewhere it does nothing.
func resetPeakRSS() { _ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) }

// peakRSS returns VmHWM in bytes, or 0 where unreadable.
func peakRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				return n * 1024
			}
		}
	}
	return 0
}

// decode runs one prompt of a measurement: plain decoding, or for the
// speculative mode speculative decoding (n-gram drafter, adaptive k) on the
// scheduled store, whose greedy tokens are plain decoding's.
func (r *Runner) decode(ctx context.Context, l *loaded, c jobs.Config, job *Job, prompt []int, n int, st *model.State) (*generate.Result, error) {
	if c.Mode != jobs.ModeSpeculative {
		return generate.Run(ctx, l.m, generate.Params{PromptIDs: prompt, MaxTokens: n, Sink: job.Sink, State: st})
	}
	if l.spec == nil {
		dec, err := speculative.NewWithDrafter(l.m, &speculative.NGramDrafter{})
		if err != nil {
			return nil, err
		}
		l.spec = dec
	}
	res, err := l.spec.Run(ctx, speculative.Params{PromptIDs: prompt, MaxTokens: n, K: speculative.AdaptiveMaxK, Adaptive: true, Sink: job.Sink})
	if err != nil {
		return nil, err
	}
	return &res.Result, nil
}
