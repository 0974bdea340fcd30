package agent

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"time"

	"github.com/lesfarm/lesfarm/agent/device"
	"github.com/lesfarm/lesfarm/jobs"
	"github.com/lesfarm/lesfarm/profile"
	"github.com/lesfarm/lesfarm/protocol"
	"github.com/lesfarm/lesfarm/runtime/expert"
	"github.com/lesfarm/lesfarm/runtime/gguf"
	"github.com/lesfarm/lesfarm/runtime/les"
	"github.com/lesfarm/lesfarm/runtime/measure"
	"github.com/lesfarm/lesfarm/runtime/pack"
	"github.com/lesfarm/lesfarm/runtime/stat"
	"github.com/lesfarm/lesfarm/runtime/tokenizer"
	"github.com/lesfarm/lesfarm/runtime/trace"
	"github.com/lesfarm/lesfarm/runtime/units"
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
	// NoLookahead turns the lookahead prefetch off in every mode
	// (expert.Options.NoLookahead).
	NoLookahead bool
	// WorkDir holds packed copies of models; empty means no packing (a job
	// asking for a packed layout then fails its streaming configs).
	WorkDir string
	// Gate is the thermal gate applied before each repetition.
	Gate ThermalGate
	// ReadState reads the device's thermal state; nil means device.ReadState.
	ReadState func() protocol.DeviceState
	Logger    *slog.Logger
	// Pin pins the measuring thread to one CPU during each config
	// (les.Plan.Pin); DiscardOutliers drops outlier repetitions by the
	// documented rule (les.MeasureOptions) and reports how many. A job's
	// spec can ask for either (jobs.Spec.Pin, DiscardOutliers).
	Pin, DiscardOutliers bool
	// EvictModel drops the model file from the page cache before each
	// config (evictModel; a phone's runner, RunnerJob.EvictModel), so that
	// its flash reads are real reads.
	EvictModel bool
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
	// OnResult is called with each config's result as it finishes (may be
	// nil); Run returns them all as well.
	OnResult func(res protocol.ConfigResult)
	// OnProgress is told of a phase that has no callback of its own, such
	// as packing the model (may be nil).
	OnProgress func(p protocol.Progress)
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
		if job.OnResult != nil {
			job.OnResult(res)
		}
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

// load opens the config's measurement session (measure.Open): the job's
// model (its mixed-precision or packed form where the config asks), in
// the config's mode, with its budget and the resolved storage profile, on
// the clock measure's rule picks for that profile.
func (r *Runner) load(ctx context.Context, job *Job, c jobs.Config) (*measure.Session, error) {
	prof, err := r.ResolveProfile(c)
	if err != nil {
		return nil, err
	}
	cfg := measure.Config{Model: job.ModelPath, Resident: c.Mode == jobs.ModeResident, Threads: cmp.Or(r.Threads, runtime.NumCPU()), Logger: r.Logger}
	if c.Mode == jobs.ModeMixedPrecision {
		// The budget is the original model's expert bytes' share.
		if cfg.Model, cfg.BudgetBase, err = r.mixed(ctx, job); err != nil {
			return nil, err
		}
	}
	if !cfg.Resident {
		if cfg.Mode, err = runtimeMode(c.Mode); err != nil {
			return nil, err
		}
		if c.Budget.IsZero() {
			return nil, fmt.Errorf("mode %s needs a budget", c.Mode)
		}
		cfg.Budget = units.Budget(c.Budget)
		cfg.Profile, cfg.Direct, cfg.NoLookahead = prof, r.Direct, r.NoLookahead
		cfg.Speculative = c.Mode == jobs.ModeSpeculative
		layout := job.Spec.Model.Layout
		if c.Mode == jobs.ModeMixedPrecision {
			layout = jobs.LayoutAsIs // the planned file is packed already when asked
		}
		switch layout {
		case jobs.LayoutPacked:
			if cfg.ExpertsPath, err = r.packed(ctx, job, pack.LayoutBlob); err != nil {
				return nil, err
			}
		case jobs.LayoutPackedCompat:
			// A compat file is a complete model (its expert FFN may be
			// padded), so it is loaded itself rather than as an experts
			// file beside the original.
			if p, err := r.packed(ctx, job, pack.LayoutCompat); err != nil {
				return nil, err
			} else if p != "" {
				cfg.Model = p
			}
		}
	}
	ses, err := measure.Open(cfg)
	if err != nil {
		switch {
		case measure.Unsupported(err):
			return nil, fmt.Errorf("unsupported model: %w", err)
		case errors.Is(err, les.ErrNotMoE):
			return nil, fmt.Errorf("mode %s needs a mixture-of-experts model; this model has no experts", c.Mode)
		}
		return nil, err
	}
	return ses, nil
}

// packed returns the path of a packed copy of the job's model, packing it
// into WorkDir once. A model that is packed already is used as it is.
func (r *Runner) packed(ctx context.Context, job *Job, layout string) (string, error) {
	modelPath, sha := job.ModelPath, job.Spec.Model.SHA256
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
	if job.OnProgress != nil {
		job.OnProgress(protocol.Progress{Phase: "pack", Message: layout})
	}
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

// runConfig measures one config through the one measurement path
// (measure.Session.Run): warm-up and repetitions of every prompt, with the
// cool-down and thermal gate before each repetition, and fills res from
// the les.Result.
func (r *Runner) runConfig(ctx context.Context, job *Job, c jobs.Config, res *protocol.ConfigResult) error {
	spec := job.Spec
	var evicted *pageCacheEviction
	if r.EvictModel {
		e, err := evictModel(job.ModelPath)
		if err != nil {
			cmp.Or(r.Logger, slog.Default()).WarnContext(ctx, "agent: the model stays in the page cache", "err", err)
		} else {
			evicted = &e
		}
	}
	ses, err := r.load(ctx, job, c)
	if err != nil {
		return err
	}
	defer ses.Close()
	ps, err := prompts(spec, ses.Tok, ses.Model.Context)
	if err != nil {
		return err
	}
	gate := r.Gate.withDefaults()
	readState := r.ReadState
	if readState == nil {
		readState = func() protocol.DeviceState { return device.ReadState(device.Options{}) }
	}
	var (
		tStart, tEnd, gateWait     []float64
		gateTimeouts, thermalReads int
		s0                         protocol.DeviceState
		waited                     time.Duration
		timedOut                   bool
	)
	plan := les.Plan{Warmup: spec.Warmup, Repetitions: spec.Repetitions, DiscardOutliers: r.DiscardOutliers || spec.DiscardOutliers, Pin: r.Pin || spec.Pin,
		RepParams: les.RepParams{Prompts: ps, MaxTokens: spec.DecodeTokens}}
	plan.Sink = job.Sink
	plan.Before = func(ctx context.Context, rep int) error {
		if rep > -spec.Warmup && spec.Cooldown > 0 {
			if err := sleep(ctx, spec.Cooldown.D()); err != nil {
				return err
			}
		}
		var err error
		if waited, timedOut, err = r.waitThermal(ctx, gate, readState); err != nil {
			return err
		}
		s0 = readState()
		if job.Position != nil {
			job.Position(c.Index, rep)
		}
		return nil
	}
	plan.After = func(rep int, _ *les.Rep) {
		s1 := readState()
		if rep < 0 {
			return
		}
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
	m, reps, err := ses.Run(ctx, plan)
	if err != nil {
		return err
	}
	fillResult(res, m)
	if len(reps) > 0 {
		res.TokensSHA256 = tokensDigest(reps[0].Tokens)
	}
	res.Extra = map[string]float64{
		"prompts":                 float64(len(ps)),
		"budget_bytes":            float64(ses.Budget),
		"expert_bytes":            float64(ses.ExpertBytes),
		"thermal_gate_wait_s":     sum(gateWait),
		"thermal_gate_timeouts":   float64(gateTimeouts),
		"decode_tokens_measured":  float64(m.DecodeTokens),
		"prefill_bytes_per_token": m.PrefillBytesPerToken,
	}
	if plan.Pin {
		res.Extra["pinned"] = 1
	}
	if evicted != nil {
		evicted.record(res.Extra)
	}
	if m.DeviceTime && m.DecodeTokens > 0 {
		res.Extra["device_time"] = 1
		res.Extra["host_compute_ms_per_token"] = m.HostComputeMSPerToken
		res.Extra["device_compute_ms_per_token"] = m.DeviceComputeMSPerToken
		if m.Dilation > 0 {
			res.Extra["dilation"] = m.Dilation
		}
	}
	if thermalReads > 0 {
		res.Extra["thermal_start_c_mean"] = stat.Mean(tStart)
		res.Extra["thermal_end_c_mean"] = stat.Mean(tEnd)
		res.Extra["thermal_end_c_max"] = slices.Max(tEnd)
	}
	res.Valid = true
	switch {
	case m.Repetitions == 0:
		res.Valid, res.InvalidReason = false, "no measured repetitions"
	case gateTimeouts > 0:
		res.Valid, res.InvalidReason = false, fmt.Sprintf("thermal gate timed out before %d of %d repetitions (device above %.0f °C)", gateTimeouts, len(gateWait), gate.MaxTempC)
	case m.DecodeTokens == 0:
		res.Valid, res.InvalidReason = false, "no tokens decoded"
	}
	return nil
}

// fillResult copies the les.Result's metrics into the wire result: every
// figure the coordinator stores is the runtime's, computed once.
func fillResult(res *protocol.ConfigResult, m *les.Result) {
	res.DecodeTPS, res.PrefillTPS, res.TTFTMS = wireStat(m.DecodeTPS), wireStat(m.PrefillTPS), wireStat(m.TTFTMS)
	res.Repetitions, res.DiscardedRepetitions = m.Repetitions, m.Discarded
	res.PeakMemoryBytes = m.PeakRSSBytes
	res.HitRate, res.PredictorPrecision, res.PredictorRecall = m.HitRate, m.PredictorPrecision, m.PredictorRecall
	res.StallFraction, res.BytesPerToken = m.StallFraction, m.BytesPerToken
}

// tokensDigest is ConfigResult.TokensSHA256 of one repetition's generated
// tokens: the sha256 of every prompt's token ids in order, each a
// little-endian int32.
func tokensDigest(tokens [][]int) string {
	h := sha256.New()
	var b [4]byte
	for _, ids := range tokens {
		for _, id := range ids {
			binary.LittleEndian.PutUint32(b[:], uint32(int32(id)))
			h.Write(b[:])
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// wireStat is a stat.Summary as the protocol carries it.
func wireStat(s stat.Summary) protocol.Stat {
	return protocol.Stat{N: s.N, Mean: s.Mean, Median: s.Median, Stddev: s.Stddev, CV: s.CV, Min: s.Min, Max: s.Max}
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
