package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lesfarm/lesfarm/runtime/expert"
	"github.com/lesfarm/lesfarm/runtime/gguf"
	"github.com/lesfarm/lesfarm/runtime/model"
	"github.com/lesfarm/lesfarm/runtime/moe"
	"github.com/lesfarm/lesfarm/runtime/spec"
)

// LadderConfig configures RunLadder. Zero fields get the defaults noted.
type LadderConfig struct {
	Model string // GGUF path (required): resident weights, and experts unless ExpertsPath
	// ExpertsPath, if set, is the file experts are streamed from (e.g. the
	// packed form of Model).
	ExpertsPath string
	// Profile emulates a device's storage; nil with Direct reads the real
	// disk with O_DIRECT.
	Profile *expert.Profile
	Direct  bool
	// BudgetBytes is the expert budget in bytes; when 0, BudgetFraction
	// of all expert bytes (in (0, 1]) is used.
	BudgetBytes    int64
	BudgetFraction float64
	Policy         string        // cache policy (default lfu)
	PredictK       int           // experts predicted per token (default expert.DefaultPredictK of the model's)
	PrefetchAll    bool          // prefetch every prediction (expert.Options.PrefetchAll)
	Modes          []expert.Mode // default expert.Modes()
	Threads        int           // default 1
	Repetitions    int           // measured runs per mode (default 3)
	Warmup         int           // unmeasured runs per mode before them (default 1)
	PromptTokens   int           // prompt length (default 16)
	GenTokens      int           // decoded tokens per run (default 32)
	// NoOracle skips the oracle run.
	NoOracle bool
	// RecordTrace, if set, is where the routing recorded in the first
	// warm-up run (prefill and decode, with the lookahead predictions) is
	// written as an expert.TraceFile, for lesfarm replay.
	RecordTrace string
	// DeviceTime reports decode in the device's time: the profile's
	// flash runs on a clock dilated to its compute speed (expert
	// package, deviceclock.go). It needs a Profile with a compute section.
	DeviceTime bool
	// ComputeSlowdown (test hook, >= 1) adds busy work to every compute
	// segment; device-time results must not move with it.
	ComputeSlowdown float64
	// Mixed, if set, adds the +mixed-precision row (ladder_mixed.go): the
	// planner's model (lesfarm quantize --budget) run in the scheduled mode
	// with the same budget and storage; MixedExperts streams its experts
	// from another file (its packed form). PerplexityIDs, if set, is the
	// text whose perplexity the row reports for it and for Model.
	Mixed, MixedExperts string
	PerplexityIDs       []int
	// Progress, if set, receives one line per finished measurement.
	Progress func(line string)
	// NoSpeculative skips the speculative rung; Draft chooses its
	// drafter: "" or "ngram" (prompt lookup), "mtp" (the model's MTP
	// block) or a draft model file.
	NoSpeculative bool
	Draft         string
}

// LadderRow is one mode's line of the ladder (JSON names as in issue 4).
type LadderRow struct {
	Mode                      string  `json:"mode"`
	DecodeTokensPerSecond     float64 `json:"decode_tokens_per_second"`
	Stddev                    float64 `json:"stddev"`
	SpeedupVsOnDemand         float64 `json:"speedup_vs_on_demand"`
	SpeedupVsOnDemandParallel float64 `json:"speedup_vs_on_demand_parallel"`
	SpeedupVsNaive            float64 `json:"speedup_vs_naive,omitempty"`
	SpeedupVsPrevious         float64 `json:"speedup_vs_previous,omitempty"` // over the row before
	DeviceTimeFields
	HitRate            float64 `json:"hit_rate"`
	PredictorPrecision float64 `json:"predictor_precision"`
	PredictorRecall    float64 `json:"predictor_recall"`
	StallFraction      float64 `json:"stall_fraction"`
	BytesReadPerToken  float64 `json:"bytes_read_per_token"`
	OracleFraction     float64 `json:"oracle_fraction"`
	// BytesVsOracle is BytesReadPerToken over the oracle's (0 without an
	// oracle run): how many times MIN's bytes the mode reads.
	BytesVsOracle   float64 `json:"bytes_vs_oracle"`
	PeakRSSBytes    int64   `json:"peak_rss_bytes"`
	IdenticalOutput bool    `json:"identical_output"`
	// Speculative is the +speculative row's telemetry.
	Speculative *LadderSpec `json:"speculative,omitempty"`
	// +mixed-precision row only (see MixedRow).
	*MixedRow

	samples []float64
}

// LadderOracle is the oracle bound.
type LadderOracle struct {
	DecodeTokensPerSecond float64 `json:"decode_tokens_per_second"`
	Stddev                float64 `json:"stddev"`
	HitRate               float64 `json:"hit_rate"`
	BytesReadPerToken     float64 `json:"bytes_read_per_token"`
	PeakRSSBytes          int64   `json:"peak_rss_bytes"`
	IdenticalOutput       bool    `json:"identical_output"`
	SpeedupVsNaive        float64 `json:"speedup_vs_naive,omitempty"`
	DeviceTimeFields
}

// DeviceTimeFields audit a device-time result: the dilation (host seconds
// per device second of compute) and the compute time per decoded token on
// the host (busy work of a slowdown included) and on the device. All zero
// in host time.
type DeviceTimeFields struct {
	Dilation                float64 `json:"dilation,omitempty"`
	HostComputeMSPerToken   float64 `json:"host_compute_ms_per_token,omitempty"`
	DeviceComputeMSPerToken float64 `json:"device_compute_ms_per_token,omitempty"`
}

func deviceFields(st expert.Stats, tokens int) DeviceTimeFields {
	if st.DeviceCompute <= 0 || tokens == 0 {
		return DeviceTimeFields{}
	}
	return DeviceTimeFields{
		Dilation:                st.Dilation(),
		HostComputeMSPerToken:   st.HostCompute.Seconds() * 1e3 / float64(tokens),
		DeviceComputeMSPerToken: st.DeviceCompute.Seconds() * 1e3 / float64(tokens),
	}
}

// LadderReport is the result of RunLadder.
type LadderReport struct {
	Model       string `json:"model"`
	Profile     string `json:"profile"`
	BudgetBytes int64  `json:"budget_bytes"`
	// TimeBase is "device" when the figures are device time, else
	// omitted (the host's wall clock).
	TimeBase string        `json:"time_base,omitempty"`
	Rows     []LadderRow   `json:"rows"`
	Oracle   *LadderOracle `json:"oracle,omitempty"`

	ExpertBytes   int64 `json:"-"` // all experts of the model
	ResidentBytes int64 `json:"-"` // non-expert weights
	ResidentRSS   int64 `json:"-"` // peak RSS of the all-resident reference run
	Threads       int   `json:"-"`
}

func (c *LadderConfig) defaults() error {
	if c.Model == "" {
		return errors.New("bench: no model given")
	}
	if c.Profile == nil && !c.Direct {
		return errors.New("bench: the ladder needs a storage profile or direct storage")
	}
	if c.DeviceTime && (c.Profile == nil || c.Profile.Compute == nil) {
		name := "direct storage"
		if c.Profile != nil {
			name = "profile " + c.Profile.Name
		}
		return fmt.Errorf("bench: device time needs a profile with a compute section (weight_bandwidth, throughput); %s has none", name)
	}
	if c.ComputeSlowdown != 0 && (c.ComputeSlowdown < 1 || c.ComputeSlowdown > 100) {
		return fmt.Errorf("bench: compute slowdown %g must be between 1 and 100", c.ComputeSlowdown)
	}
	if c.BudgetBytes <= 0 && (c.BudgetFraction <= 0 || c.BudgetFraction > 1) {
		return errors.New("bench: the ladder needs an expert budget (bytes, or a fraction of the expert bytes)")
	}
	if len(c.Modes) == 0 {
		c.Modes = expert.Modes()
	}
	c.Threads = max(c.Threads, 1)
	if c.Repetitions == 0 {
		c.Repetitions = 3
	}
	if c.Repetitions < 1 || c.Warmup < 0 {
		return errors.New("bench: repetitions must be >= 1 and warm-up >= 0")
	}
	if c.PromptTokens == 0 {
		c.PromptTokens = 16
	}
	if c.GenTokens == 0 {
		c.GenTokens = 32
	}
	if c.PromptTokens < 1 || c.GenTokens < 2 {
		return errors.New("bench: the ladder needs a prompt of at least 1 token and at least 2 generated tokens")
	}
	return nil
}

// ParseBudget parses an expert budget: a fraction of the expert bytes such
// as 0.2, 1.0 or 20% (returned as fraction), or a size such as 512MiB or
// 4096 (returned as bytes). A plain number is a fraction when it has a
// decimal point or is at most 1 ("1" is the whole set); a size needs a unit or must
// exceed 1.
func ParseBudget(s string) (bytes int64, fraction float64, err error) {
	t := strings.TrimSpace(s)
	if p, ok := strings.CutSuffix(t, "%"); ok {
		f, err := strconv.ParseFloat(p, 64)
		if err != nil || f <= 0 || f > 100 {
			return 0, 0, fmt.Errorf("budget %q: a percentage must be in (0, 100]", s)
		}
		return 0, f / 100, nil
	}
	if f, err := strconv.ParseFloat(t, 64); err == nil && f > 0 && f <= 1 {
		return 0, f, nil
	}
	n, err := expert.ParseSize(t)
	if err != nil || n < 2 {
		return 0, 0, fmt.Errorf("budget %q is neither a fraction in (0, 1] (e.g. 0.2 or 20%%) nor a size (e.g. 512MiB)", s)
	}
	return n, 0, nil
}

// ladderRun is what one mode measured over its repetitions.
type ladderRun struct {
	samples   []float64 // decode tok/s per repetition
	identical bool
	stats     expert.Stats // decode-phase deltas summed over repetitions
	decode    time.Duration
	tokens    int // decoded tokens over repetitions
	peakRSS   int64
	// expertBytes is the loaded model's expert bytes.
	expertBytes int64
}

// RunLadder measures the LES ladder: an all-resident reference run for the
// expected tokens, then each mode (and the Belady oracle replaying the
// routing recorded in the first warm-up run) with its own model and store,
// all loaded side by side: Warmup runs each, then Repetitions rounds that
// run every mode once. Peak RSS per mode is the process's RSS before any
// mode was loaded plus the growth while that mode loaded and warmed up.
func RunLadder(ctx context.Context, cfg LadderConfig) (*LadderReport, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	rep := &LadderReport{Model: cfg.Model, Threads: cfg.Threads}
	if cfg.DeviceTime {
		rep.TimeBase = "device"
	}
	switch {
	case cfg.Direct:
		rep.Profile = "direct"
	default:
		rep.Profile = cfg.Profile.Name
	}
	progress := func(format string, args ...any) {
		if cfg.Progress != nil {
			cfg.Progress(fmt.Sprintf(format, args...))
		}
	}

	// Reference: all experts resident.
	resetPeakRSS()
	ref, prompt, err := residentReference(ctx, cfg, rep)
	if err != nil {
		return nil, err
	}
	rep.ResidentRSS = peakRSS()
	budget := cfg.BudgetBytes
	if budget <= 0 {
		budget = int64(cfg.BudgetFraction * float64(rep.ExpertBytes))
	}
	rep.BudgetBytes = budget
	progress("reference (all resident): %d tokens; experts %.2f GB, budget %.2f GB (%.1f%%), peak RSS %.2f GB", len(ref), float64(rep.ExpertBytes)/1e9, float64(budget)/1e9, 100*float64(budget)/float64(rep.ExpertBytes), float64(rep.ResidentRSS)/1e9)

	// Load every mode (and the oracle) side by side, warm each up, then
	// measure them round-robin, so the machine's drift hits all alike.
	freeMemory()
	base := currentRSS()
	type loaded struct {
		mode  expert.Mode
		mixed bool   // the +mixed-precision row: cfg.Mixed in the scheduled mode
		name  string // the row's mode name
		m     *model.Model
		store *expert.Store
		r     *ladderRun
	}
	var all []*loaded
	defer func() {
		for _, l := range all {
			l.m.Close()
		}
	}()
	var recorded *expert.RoutingTrace
	var recordedFrom expert.TraceModel
	load := func(mode expert.Mode, mixed bool) error {
		before := currentRSS()
		resetPeakRSS()
		lc := cfg
		if mixed {
			lc.Model, lc.ExpertsPath = cfg.Mixed, cfg.MixedExperts
		}
		m, s, err := loadMode(lc, mode, budget, !mixed && recorded == nil && mode != expert.OracleMode, recorded)
		if err != nil {
			return err
		}
		l := &loaded{mode: mode, mixed: mixed, name: mode.String(), m: m, store: s, r: &ladderRun{identical: true}}
		if mixed {
			l.name = MixedMode
		}
		l.r.expertBytes = m.ExpertBytes
		all = append(all, l)
		for i := range cfg.Warmup {
			toks, _, err := greedyRun(ctx, m, prompt, cfg.GenTokens, nil)
			if err != nil {
				return err
			}
			if i == 0 && recorded == nil && !mixed {
				recorded, recordedFrom = s.RecordedTrace(), s.TraceModel()
			}
			l.r.identical = l.r.identical && slices.Equal(toks, ref)
		}
		l.r.peakRSS = base + max(0, peakRSS()-before)
		progress("%-18s loaded and warmed up (%d runs)", l.name, cfg.Warmup)
		return nil
	}
	for _, mode := range cfg.Modes {
		if err := load(mode, false); err != nil {
			return nil, fmt.Errorf("bench: %s: %w", mode, err)
		}
	}
	if cfg.Mixed != "" {
		if err := load(expert.Scheduled, true); err != nil {
			return nil, fmt.Errorf("bench: %s (%s): %w", MixedMode, cfg.Mixed, err)
		}
	}
	var sp *specLadder
	if !cfg.NoSpeculative {
		before := currentRSS()
		resetPeakRSS()
		if sp, err = loadSpecLadder(cfg, cfg.Modes[len(cfg.Modes)-1], budget); err != nil {
			return nil, fmt.Errorf("bench: %s: %w", SpeculativeRow, err)
		}
		defer sp.close()
		for range cfg.Warmup {
			toks, _, err := sp.run(ctx, prompt, cfg.GenTokens, nil)
			if err != nil {
				return nil, fmt.Errorf("bench: %s: %w", SpeculativeRow, err)
			}
			sp.r.identical = sp.r.identical && slices.Equal(toks, ref)
		}
		sp.stats = spec.Stats{}
		sp.r.peakRSS = base + max(0, peakRSS()-before)
		progress("%-18s loaded and warmed up (%d runs)", SpeculativeRow, cfg.Warmup)
	}
	if !cfg.NoOracle || cfg.RecordTrace != "" {
		if recorded == nil {
			// No warm-up recorded the routing: record it now.
			if err := func() error {
				m, s, err := loadMode(cfg, expert.OnDemandParallel, budget, true, nil)
				if err != nil {
					return err
				}
				defer m.Close()
				if _, _, err := greedyRun(ctx, m, prompt, cfg.GenTokens, nil); err != nil {
					return err
				}
				recorded, recordedFrom = s.RecordedTrace(), s.TraceModel()
				return nil
			}(); err != nil {
				return nil, fmt.Errorf("bench: recording the routing: %w", err)
			}
		}
	}
	if cfg.RecordTrace != "" {
		tf := &expert.TraceFile{Model: recordedFrom, Trace: *recorded}
		if err := tf.WriteFile(cfg.RecordTrace); err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
		progress("recorded routing (%d calls, %d demands) written to %s", len(recorded.Calls), recorded.Len(), cfg.RecordTrace)
	}
	if !cfg.NoOracle {
		if err := load(expert.OracleMode, false); err != nil {
			return nil, fmt.Errorf("bench: oracle: %w", err)
		}
	}
	for rep := range cfg.Repetitions {
		for _, l := range all {
			var before expert.Stats
			toks, d, err := greedyRun(ctx, l.m, prompt, cfg.GenTokens, func() { before = l.store.Stats() })
			if err != nil {
				return nil, fmt.Errorf("bench: %s: %w", l.name, err)
			}
			after := l.store.Stats()
			r := l.r
			r.identical = r.identical && slices.Equal(toks, ref)
			addDelta(&r.stats, before, after)
			if cfg.DeviceTime {
				d = after.DeviceTime() - before.DeviceTime()
			}
			r.decode += d
			r.tokens += len(toks) - 1
			r.samples = append(r.samples, float64(len(toks)-1)/d.Seconds())
		}
		if sp != nil {
			var before expert.Stats
			toks, d, err := sp.run(ctx, prompt, cfg.GenTokens, func() { before = sp.store.Stats() })
			if err != nil {
				return nil, fmt.Errorf("bench: %s: %w", SpeculativeRow, err)
			}
			after := sp.store.Stats()
			r := sp.r
			r.identical = r.identical && slices.Equal(toks, ref)
			addDelta(&r.stats, before, after)
			if cfg.DeviceTime {
				d = after.DeviceTime() - before.DeviceTime()
			}
			r.decode += d
			r.tokens += len(toks) - 1
			r.samples = append(r.samples, float64(len(toks)-1)/d.Seconds())
		}
		progress("repetition %d/%d done", rep+1, cfg.Repetitions)
	}
	runs := map[expert.Mode]*ladderRun{}
	var mixedRun *ladderRun
	for _, l := range all {
		if l.mixed {
			mixedRun = l.r
		} else {
			runs[l.mode] = l.r
		}
		mean, sd := meanStd(l.r.samples)
		progress("%-18s %7.2f ± %.2f tok/s, hit %.3f, stall %.2f, %.1f MB read/token, identical %v", l.name, mean, sd, l.r.stats.HitRate(), l.r.stallFraction(), l.r.bytesPerToken()/1e6, l.r.identical)
	}
	if o := runs[expert.OracleMode]; o != nil {
		mean, sd := meanStd(o.samples)
		rep.Oracle = &LadderOracle{DecodeTokensPerSecond: mean, Stddev: sd, HitRate: o.stats.HitRate(), BytesReadPerToken: o.bytesPerToken(), PeakRSSBytes: o.peakRSS, IdenticalOutput: o.identical}
	}
	fillRows(rep, cfg.Modes, runs)
	last := len(rep.Rows) - 1 // the last expert mode's row: the speculative rung builds on it
	if mixedRun != nil {
		if err := addMixedRow(ctx, cfg, rep, runs, mixedRun); err != nil {
			return nil, err
		}
	}
	if sp != nil {
		rep.Rows = append(rep.Rows, sp.row(rep, &rep.Rows[last]))
		mean, sd := meanStd(sp.r.samples)
		progress("%-18s %7.2f ± %.2f tok/s, %.2f tokens per target pass, identical %v", SpeculativeRow, mean, sd, sp.stats.TokensPerTargetPass(), sp.r.identical)
	}
	return rep, nil
}

// fillRows turns the runs of modes (and of the oracle, if measured) into
// the report's rows and oracle bound.
func fillRows(rep *LadderReport, modes []expert.Mode, runs map[expert.Mode]*ladderRun) {
	if o := runs[expert.OracleMode]; o != nil && rep.Oracle == nil {
		mean, sd := meanStd(o.samples)
		rep.Oracle = &LadderOracle{DecodeTokensPerSecond: mean, Stddev: sd, HitRate: o.stats.HitRate(), BytesReadPerToken: o.bytesPerToken(), PeakRSSBytes: o.peakRSS, IdenticalOutput: o.identical}
	}
	if o := runs[expert.OracleMode]; o != nil {
		rep.Oracle.DeviceTimeFields = deviceFields(o.stats, o.tokens)
		if b := tpsOf(runs, expert.Naive); b > 0 {
			rep.Oracle.SpeedupVsNaive = rep.Oracle.DecodeTokensPerSecond / b
		}
	}
	for _, mode := range modes {
		row := runs[mode].row(mode.String())
		var prev *LadderRow
		if n := len(rep.Rows); n > 0 {
			prev = &rep.Rows[n-1]
		}
		rep.relate(&row, prev, func(m expert.Mode) float64 { return tpsOf(runs, m) })
		rep.Rows = append(rep.Rows, row)
	}
}

// row is the ladder row of one measured run, before the figures relative to
// other rows (see relate).
func (r *ladderRun) row(mode string) LadderRow {
	mean, sd := meanStd(r.samples)
	pred := r.stats.Prediction()
	return LadderRow{
		Mode: mode, DecodeTokensPerSecond: mean, Stddev: sd,
		HitRate: r.stats.HitRate(), PredictorPrecision: pred.Precision(), PredictorRecall: pred.Recall(),
		StallFraction: r.stallFraction(), BytesReadPerToken: r.bytesPerToken(),
		PeakRSSBytes: r.peakRSS, IdenticalOutput: r.identical, samples: r.samples,
		DeviceTimeFields: deviceFields(r.stats, r.tokens),
	}
}

// relate fills row's speedups over the naive, on-demand and
// on-demand-parallel rows (base gives a mode's decode tok/s, 0 when it was
// not measured) and over prev (the row before it, nil for the first), and
// its fractions of the oracle's tok/s and bytes. It is the one definition of
// every relative ladder figure, used by each kind of row.
func (rep *LadderReport) relate(row *LadderRow, prev *LadderRow, base func(expert.Mode) float64) {
	mean := row.DecodeTokensPerSecond
	if b := base(expert.Naive); b > 0 {
		row.SpeedupVsNaive = mean / b
	}
	if prev != nil && prev.DecodeTokensPerSecond > 0 {
		row.SpeedupVsPrevious = mean / prev.DecodeTokensPerSecond
	}
	if b := base(expert.OnDemand); b > 0 {
		row.SpeedupVsOnDemand = mean / b
	}
	if b := base(expert.OnDemandParallel); b > 0 {
		row.SpeedupVsOnDemandParallel = mean / b
	}
	if rep.Oracle != nil && rep.Oracle.DecodeTokensPerSecond > 0 {
		row.OracleFraction = mean / rep.Oracle.DecodeTokensPerSecond
	}
	if rep.Oracle != nil && rep.Oracle.BytesReadPerToken > 0 {
		row.BytesVsOracle = row.BytesReadPerToken / rep.Oracle.BytesReadPerToken
	}
}

func (r *ladderRun) stallFraction() float64 {
	if r.decode <= 0 {
		return 0
	}
	if r.stats.DeviceCompute > 0 { // device time: the device's stall
		return r.stats.DeviceStall.Seconds() / r.decode.Seconds()
	}
	return r.stats.Stall.Seconds() / r.decode.Seconds()
}

// tpsOf returns the mean decode tok/s of mode's run, or 0.
func tpsOf(runs map[expert.Mode]*ladderRun, m expert.Mode) float64 {
	if r := runs[m]; r != nil {
		mean, _ := meanStd(r.samples)
		return mean
	}
	return 0
}

func (r *ladderRun) bytesPerToken() float64 {
	if r.tokens == 0 {
		return 0
	}
	return float64(r.stats.BytesRead) / float64(r.tokens)
}

// ladderPrompt is a deterministic pseudo-random prompt over the vocabulary.
func ladderPrompt(n, vocab int) []int {
	toks := make([]int, n)
	x := uint64(0x2545f4914f6cdd1d)
	for i := range toks {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		toks[i] = int(x % uint64(vocab))
	}
	return toks
}

// residentReference loads the model with every expert in RAM and returns
// its greedy tokens.
func residentReference(ctx context.Context, cfg LadderConfig, rep *LadderReport) ([]int, []int, error) {
	m, err := model.Load(cfg.Model, model.Options{Threads: cfg.Threads})
	if err != nil {
		return nil, nil, err
	}
	defer m.Close()
	if !m.IsMoE() {
		return nil, nil, fmt.Errorf("bench: %s is not a Mixture-of-Experts model; the ladder streams experts", cfg.Model)
	}
	rep.ExpertBytes = m.ExpertBytes
	rep.ResidentBytes = m.ResidentBytes
	if cfg.PromptTokens+cfg.GenTokens > m.Context {
		return nil, nil, fmt.Errorf("bench: %d prompt + %d generated tokens exceed the context length %d", cfg.PromptTokens, cfg.GenTokens, m.Context)
	}
	prompt := ladderPrompt(cfg.PromptTokens, m.Vocab)
	toks, _, err := greedyRun(ctx, m, prompt, cfg.GenTokens, nil)
	if err != nil {
		return nil, nil, err
	}
	m.Close()
	freeMemory()
	return toks, prompt, nil
}

// greedyRun prefills prompt and decodes n tokens greedily, returning the
// tokens and the decode wall time. before/after hooks bracket the decode.
func greedyRun(ctx context.Context, m *model.Model, prompt []int, n int, decodeStart func()) ([]int, time.Duration, error) {
	st, err := m.NewState(len(prompt) + n)
	if err != nil {
		return nil, 0, err
	}
	var logits []float32
	for pos := 0; pos < len(prompt); pos += 512 {
		if logits, err = st.Forward(ctx, prompt[pos:min(pos+512, len(prompt))], false); err != nil {
			return nil, 0, err
		}
	}
	toks := make([]int, 0, n)
	toks = append(toks, argmax(logits))
	if decodeStart != nil {
		decodeStart()
	}
	t0 := time.Now()
	one := make([]int, 1)
	for len(toks) < n {
		one[0] = toks[len(toks)-1]
		if logits, err = st.Forward(ctx, one, false); err != nil {
			return nil, 0, err
		}
		toks = append(toks, argmax(logits))
	}
	return toks, time.Since(t0), nil
}

func argmax(x []float32) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}

// loadMode loads the model with a fresh store in mode. With record the
// store records its routing; the oracle mode replays tr (one run's routing,
// repeated for every run the ladder makes).
func loadMode(cfg LadderConfig, mode expert.Mode, budget int64, record bool, tr *expert.RoutingTrace) (*model.Model, *expert.Store, error) {
	opts := expert.Options{Mode: mode, Budget: budget, Policy: cfg.Policy, Profile: cfg.Profile, Direct: cfg.Direct, Record: record, PredictK: cfg.PredictK, PrefetchAll: cfg.PrefetchAll,
		DeviceTime: cfg.DeviceTime, ComputeSlowdown: cfg.ComputeSlowdown}
	expertsPath := cfg.ExpertsPath
	if mode == expert.Naive {
		expertsPath = "" // mmap-like: the file as it is, not a packed copy
	}
	if mode == expert.OracleMode {
		if tr == nil {
			return nil, nil, errors.New("no recorded routing to replay")
		}
		full := &expert.RoutingTrace{}
		for range cfg.Warmup + cfg.Repetitions {
			full.Calls = append(full.Calls, tr.Calls...)
		}
		opts.Trace = full
	}
	var store *expert.Store
	m, err := model.Load(cfg.Model, model.Options{Threads: cfg.Threads, Experts: func(f *gguf.File, shapes []moe.LayerShape) (moe.Source, error) {
		s, err := expert.Open(cfg.Model, f, shapes, expertsPath, opts)
		store = s
		return s, err
	}})
	if err != nil {
		return nil, nil, err
	}
	return m, store, nil
}

// addDelta adds after-before to acc (the counters used by the ladder).
func addDelta(acc *expert.Stats, before, after expert.Stats) {
	acc.Demanded += after.Demanded - before.Demanded
	acc.Hits += after.Hits - before.Hits
	acc.Misses += after.Misses - before.Misses
	acc.BytesRead += after.BytesRead - before.BytesRead
	acc.Reads += after.Reads - before.Reads
	acc.Stall += after.Stall - before.Stall
	acc.HostCompute += after.HostCompute - before.HostCompute
	acc.DeviceCompute += after.DeviceCompute - before.DeviceCompute
	acc.DeviceStall += after.DeviceStall - before.DeviceStall
	acc.PrefetchIssued += after.PrefetchIssued - before.PrefetchIssued
	acc.PrefetchUsed += after.PrefetchUsed - before.PrefetchUsed
	acc.PrefetchWasted += after.PrefetchWasted - before.PrefetchWasted
	if acc.PredLayers == nil {
		acc.PredLayers = make([]expert.PredStats, len(after.PredLayers))
	}
	for i := range after.PredLayers {
		a, b := after.PredLayers[i], before.PredLayers[i]
		p := &acc.PredLayers[i]
		p.Uses += a.Uses - b.Uses
		p.Correct += a.Correct - b.Correct
		p.Predicted += a.Predicted - b.Predicted
		p.Demanded += a.Demanded - b.Demanded
	}
}

// freeMemory returns freed heap to the OS so the next peak RSS reading
// belongs to the next run.
func freeMemory() {
	runtime.GC()
	debug.FreeOSMemory()
}

// resetPeakRSS resets the kernel's peak RSS (VmHWM) of this process (Linux;
// elsewhere a no-op, and peaks accumulate).
func resetPeakRSS() {
	_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
}

// peakRSS returns VmHWM in bytes, or 0 where unavailable.
func peakRSS() int64 { return procStatus("VmHWM:") }

// currentRSS returns VmRSS in bytes, or 0 where unavailable.
func currentRSS() int64 { return procStatus("VmRSS:") }

func procStatus(field string) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}
