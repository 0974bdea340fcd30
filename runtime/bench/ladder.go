package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/lesfarm/lesfarm/runtime/expert"
	"github.com/lesfarm/lesfarm/runtime/les"
	"github.com/lesfarm/lesfarm/runtime/measure"
	"github.com/lesfarm/lesfarm/runtime/routing"
	"github.com/lesfarm/lesfarm/runtime/spec"
	"github.com/lesfarm/lesfarm/runtime/units"
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
	// Budget is the expert budget: bytes, or a fraction in (0, 1] of all
	// expert bytes (measure.Config.Budget).
	Budget       units.Budget
	Policy       string        // cache policy (default lfu)
	PredictK     int           // experts predicted per token (default expert.DefaultPredictK of the model's)
	PrefetchAll  bool          // prefetch every prediction (expert.Options.PrefetchAll)
	Modes        []expert.Mode // default expert.Modes()
	Threads      int           // default 1
	Repetitions  int           // measured runs per mode (default 3)
	Warmup       int           // unmeasured runs per mode before them (default 1)
	PromptTokens int           // prompt length (default 16)
	// Prompt, if set, is the prompt's token ids (PromptTokens is then its
	// length); by default a deterministic pseudo-random prompt.
	Prompt    []int
	GenTokens int // decoded tokens per run (default 32)
	// Reference, if set, is the recorded reference the rungs are checked
	// against (its prompt replaces Prompt); ResidentReference makes one
	// with every expert in RAM instead, on a machine that holds the model.
	// Neither: the on-demand mode generates the reference under Budget, so
	// the ladder never needs the whole model in RAM (the phone case).
	Reference         *LadderReference
	ResidentReference bool
	// OneAtATime loads, warms up and measures one mode at a time, closing
	// it before the next loads, instead of all side by side: the ladder
	// then needs one rung's memory (resident weights + budget), as under a
	// phone's RAM cap, at the price of drift between rows.
	OneAtATime bool
	// NoOracle skips the oracle run.
	NoOracle bool
	// RecordTrace, if set, is where the routing recorded in the first
	// warm-up run (prefill and decode, with the lookahead predictions) is
	// written as an expert.TraceFile, for lesfarm replay.
	RecordTrace string
	// DeviceTime reports decode in the device's time: the profile's
	// flash runs on a clock dilated to its compute speed (expert
	// package, deviceclock.go). It needs a Profile with a compute section
	// (measure.TimeDevice); false is measure.TimeHost.
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
	// DraftK, if positive, is a fixed draft length for the speculative
	// rung instead of adaptive k (the bound adaptive k is compared with).
	DraftK int
	// VerifyCut ends the speculative rung's verify passes at the first
	// drafted position that would add more than VerifyCutSlack expert
	// reads per layer to what the positions before it need, and limits
	// their lookahead to position 0 (spec.Params.CutVerify, CutSlack).
	// Off, every drafted position is verified, whatever it reads.
	VerifyCut      bool
	VerifyCutSlack int
	// DiscardOutliers drops each mode's outlier repetitions by decode tok/s
	// (les.MeasureOptions: beyond median ± 3·1.4826·MAD) before its figures
	// are taken; each row reports how many it dropped.
	DiscardOutliers bool
	// Pin pins the measuring thread to one CPU for the whole ladder
	// (les.Pin).
	Pin bool
}

// LadderRow is one mode's line of the ladder (JSON names as in issue 4).
type LadderRow struct {
	Mode                  string  `json:"mode"`
	DecodeTokensPerSecond float64 `json:"decode_tokens_per_second"`
	Stddev                float64 `json:"stddev"`
	Noise
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
}

// Noise is how a row's decode tok/s varied: its coefficient of variation
// (stddev / mean), the measured repetitions it uses and how many more the
// outlier rule dropped (LadderConfig.DiscardOutliers).
type Noise struct {
	CV          float64 `json:"cv"`
	Repetitions int     `json:"repetitions"`
	Discarded   int     `json:"discarded_repetitions,omitempty"`
}

func noiseOf(r *les.Result) Noise {
	return Noise{CV: r.DecodeTPS.CV, Repetitions: r.Repetitions, Discarded: r.Discarded}
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
	Noise
	DeviceTimeFields
}

// DeviceTimeFields audit a device-time result (les.DeviceTimeFields, the
// one definition).
type DeviceTimeFields = les.DeviceTimeFields

// LadderReport is the result of RunLadder.
type LadderReport struct {
	Model       string `json:"model"`
	Profile     string `json:"profile"`
	BudgetBytes int64  `json:"budget_bytes"`
	// TimeBase is "device" when the figures are device time, else
	// omitted (the host's wall clock).
	TimeBase string `json:"time_base,omitempty"`
	// Routing is a synthetic model's routing preset (lesfarm synth
	// --routing: uniform or fine-grained-moe); empty for a trained model.
	Routing string `json:"routing,omitempty"`
	// RoutingStats is the model's routing over all layers, measured as
	// lesfarm routing-stats measures it (runtime/routing: lookahead
	// recall, reuse, reuse@8, verify×4, popularity); nil when not measured.
	RoutingStats *routing.Metrics `json:"routing_stats,omitempty"`
	Rows         []LadderRow      `json:"rows"`
	Oracle       *LadderOracle    `json:"oracle,omitempty"`

	// ReferenceSource says where the tokens every rung is checked against
	// came from: ReferenceRecorded, ReferenceResident or ReferenceStreamed.
	ReferenceSource string `json:"reference"`
	// Reference is the recorded or all-resident reference (nil when
	// streamed), for `--record-reference`.
	Reference *LadderReference `json:"-"`

	ExpertBytes   int64 `json:"-"` // all experts of the model
	ResidentBytes int64 `json:"-"` // non-expert weights
	ResidentRSS   int64 `json:"-"` // peak RSS of an all-resident reference run (0: none)
	Threads       int   `json:"-"`
}

func (c *LadderConfig) defaults() error {
	if c.Model == "" {
		return errors.New("bench: no model given")
	}
	if c.Profile == nil && !c.Direct {
		return errors.New("bench: the ladder needs a storage profile or direct storage")
	}
	if _, err := c.measure().DeviceTime(); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if c.ComputeSlowdown != 0 && (c.ComputeSlowdown < 1 || c.ComputeSlowdown > 100) {
		return fmt.Errorf("bench: compute slowdown %g must be between 1 and 100", c.ComputeSlowdown)
	}
	if b := c.Budget; b.IsZero() || b.Bytes < 0 || b.Fraction < 0 || b.Fraction > 1 {
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
	if len(c.Prompt) > 0 {
		c.PromptTokens = len(c.Prompt)
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

// ladderRun is what one mode measured: its repetitions, and the Result
// les.Measure makes of them (finish).
type ladderRun struct {
	reps      []les.Rep
	identical bool
	peakRSS   int64
	// expertBytes is the loaded model's expert bytes.
	expertBytes int64
	res         les.Result
}

// finish computes the run's Result from its repetitions.
func (r *ladderRun) finish(cfg *LadderConfig) {
	r.res = les.Measure(r.reps, les.MeasureOptions{DiscardOutliers: cfg.DiscardOutliers, Warmup: cfg.Warmup})
	r.res.PeakRSSBytes = r.peakRSS
}

func (r *ladderRun) progress(name string, progress func(string, ...any)) {
	x := &r.res
	progress("%-18s %7.2f ± %.2f tok/s (cv %.3f, n %d), hit %.3f, stall %.2f, %.1f MB read/token, identical %v", name, x.DecodeTPS.Mean, x.DecodeTPS.Stddev, x.DecodeTPS.CV, x.Repetitions, x.HitRate, x.StallFraction, x.BytesPerToken/1e6, r.identical)
}

// RunLadder measures the LES ladder: a reference run for the expected
// tokens (ladderReference: recorded, streamed, or all-resident on request),
// then each mode (and the Belady oracle replaying the
// routing recorded in the first warm-up run) with its own les.Session,
// all loaded side by side: Warmup runs each, then Repetitions rounds that
// run every mode once. Peak RSS per mode is the process's RSS before any
// mode was loaded plus the growth while that mode loaded and warmed up
// (les.Session.PeakRSS).
func RunLadder(ctx context.Context, cfg LadderConfig) (*LadderReport, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	if cfg.Pin {
		unpin, err := les.Pin(les.DefaultPinCPU())
		if err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
		defer unpin()
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

	// Reference: the tokens every rung must generate (ladder_reference.go).
	ref, prompt, err := ladderReference(ctx, cfg, rep)
	if err != nil {
		return nil, err
	}
	rep.BudgetBytes = cfg.Budget.Resolve(rep.ExpertBytes)
	progress("reference (%s): %d tokens; experts %.2f GB, budget %.2f GB (%.1f%%)", rep.ReferenceSource, len(ref), float64(rep.ExpertBytes)/1e9, float64(rep.BudgetBytes)/1e9, 100*float64(rep.BudgetBytes)/float64(rep.ExpertBytes))
	// Every rung gets the same cache bytes, the mixed model's too.
	budget := units.Budget{Bytes: rep.BudgetBytes}

	// Load every mode (and the oracle) side by side, warm each up, then
	// measure them round-robin, so the machine's drift hits all alike.
	les.FreeMemory()
	base := les.CurrentRSS()
	type loaded struct {
		mode  expert.Mode
		mixed bool   // the +mixed-precision row: cfg.Mixed in the scheduled mode
		name  string // the row's mode name
		s     *les.Session
		r     *ladderRun
	}
	var all []*loaded
	defer func() {
		for _, l := range all {
			if l.s != nil {
				l.s.Close()
			}
		}
	}()
	one := les.RepParams{Prompts: [][]int{prompt}, MaxTokens: cfg.GenTokens}
	var recorded *expert.RoutingTrace
	var recordedFrom expert.TraceModel
	load := func(mode expert.Mode, mixed bool) error {
		lc := cfg
		if mixed {
			lc.Model, lc.ExpertsPath = cfg.Mixed, cfg.MixedExperts
		}
		s, err := openMode(lc, mode, budget, base, !mixed && recorded == nil && mode != expert.OracleMode, recorded)
		if err != nil {
			return err
		}
		l := &loaded{mode: mode, mixed: mixed, name: mode.String(), s: s, r: &ladderRun{identical: true, expertBytes: s.ExpertBytes}}
		if mixed {
			l.name = MixedMode
		}
		all = append(all, l)
		for i := range cfg.Warmup {
			r, err := s.Repetition(ctx, one)
			if err != nil {
				return err
			}
			if i == 0 && recorded == nil && !mixed {
				recorded, recordedFrom = s.Store.Meter().Recorded(), s.Store.Info().Model
			}
			l.r.identical = l.r.identical && slices.Equal(r.Tokens[0], ref)
		}
		l.r.peakRSS = s.PeakRSS()
		progress("%-18s loaded and warmed up (%d runs)", l.name, cfg.Warmup)
		if cfg.OneAtATime {
			err := measureAlone(ctx, cfg, l.name, s, one, ref, l.r, progress)
			s.Close()
			l.s = nil
			les.FreeMemory()
			return err
		}
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
		if sp, err = loadSpecLadder(cfg, cfg.Modes[len(cfg.Modes)-1], budget, base); err != nil {
			return nil, fmt.Errorf("bench: %s: %w", SpeculativeRow, err)
		}
		spOpen := true
		defer func() {
			if spOpen {
				sp.close()
			}
		}()
		for range cfg.Warmup {
			r, err := sp.s.Repetition(ctx, one)
			if err != nil {
				return nil, fmt.Errorf("bench: %s: %w", SpeculativeRow, err)
			}
			sp.r.identical = sp.r.identical && slices.Equal(r.Tokens[0], ref)
		}
		sp.dec.Stats = spec.Stats{}
		sp.r.peakRSS = sp.s.PeakRSS()
		progress("%-18s loaded and warmed up (%d runs)", SpeculativeRow, cfg.Warmup)
		if cfg.OneAtATime {
			err := measureAlone(ctx, cfg, SpeculativeRow, sp.s, one, ref, sp.r, progress)
			sp.close()
			spOpen = false
			les.FreeMemory()
			if err != nil {
				return nil, err
			}
		}
	}
	if !cfg.NoOracle || cfg.RecordTrace != "" {
		if recorded == nil {
			// No warm-up recorded the routing: record it now.
			if err := func() error {
				s, err := openMode(cfg, expert.OnDemandParallel, budget, base, true, nil)
				if err != nil {
					return err
				}
				defer s.Close()
				if _, err := s.Repetition(ctx, one); err != nil {
					return err
				}
				recorded, recordedFrom = s.Store.Meter().Recorded(), s.Store.Info().Model
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
	// Each repetition runs every mode once. Odd repetitions run them in
	// reverse order: every mode reads the same experts in the same order
	// (same prompt, same greedy tokens), and on a shared disk whose host
	// caches recent blocks the mode that runs right after another reads
	// faster (an A/A test of two identical rows measured 1.2-1.3x for the
	// second), so the order alternates and the bias cancels.
	type runner struct {
		name string
		s    *les.Session
		r    *ladderRun
	}
	order := make([]runner, 0, len(all)+1)
	for _, l := range all {
		if l.s != nil { // not measured alone (OneAtATime)
			order = append(order, runner{l.name, l.s, l.r})
		}
	}
	if sp != nil && !cfg.OneAtATime {
		order = append(order, runner{SpeculativeRow, sp.s, sp.r})
	}
	for i := range cfg.Repetitions {
		if len(order) == 0 {
			break
		}
		for j := range order {
			l := order[j]
			if i%2 == 1 {
				l = order[len(order)-1-j]
			}
			r, err := l.s.Repetition(ctx, one)
			if err != nil {
				return nil, fmt.Errorf("bench: %s: %w", l.name, err)
			}
			l.r.identical = l.r.identical && slices.Equal(r.Tokens[0], ref)
			l.r.reps = append(l.r.reps, r)
		}
		progress("repetition %d/%d done", i+1, cfg.Repetitions)
	}
	runs := map[expert.Mode]*ladderRun{}
	var mixedRun *ladderRun
	for _, l := range all {
		if l.mixed {
			mixedRun = l.r
		} else {
			runs[l.mode] = l.r
		}
		l.r.finish(&cfg)
		l.r.progress(l.name, progress)
	}
	fillRows(rep, cfg.Modes, runs)
	last := len(rep.Rows) - 1 // the last expert mode's row: the speculative rung builds on it
	if mixedRun != nil {
		if err := addMixedRow(ctx, cfg, rep, runs, mixedRun); err != nil {
			return nil, err
		}
	}
	if sp != nil {
		sp.r.finish(&cfg)
		rep.Rows = append(rep.Rows, sp.row(rep, &rep.Rows[last], runs[cfg.Modes[len(cfg.Modes)-1]].reps))
		progress("%-18s %7.2f ± %.2f tok/s, %.2f tokens per target pass, identical %v", SpeculativeRow, sp.r.res.DecodeTPS.Mean, sp.r.res.DecodeTPS.Stddev, sp.dec.Stats.TokensPerTargetPass(), sp.r.identical)
	}
	return rep, nil
}

// fillRows turns the finished runs of modes (and of the oracle, if
// measured) into the report's rows and oracle bound.
func fillRows(rep *LadderReport, modes []expert.Mode, runs map[expert.Mode]*ladderRun) {
	if o := runs[expert.OracleMode]; o != nil {
		x := &o.res
		rep.Oracle = &LadderOracle{DecodeTokensPerSecond: x.DecodeTPS.Mean, Stddev: x.DecodeTPS.Stddev, Noise: noiseOf(x), HitRate: x.HitRate,
			BytesReadPerToken: x.BytesPerToken, PeakRSSBytes: o.peakRSS, IdenticalOutput: o.identical, DeviceTimeFields: x.DeviceTimeFields}
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

// row is the ladder row of one finished run, before the figures relative to
// other rows (see relate). Every figure is les.Result's.
func (r *ladderRun) row(mode string) LadderRow {
	x := &r.res
	return LadderRow{
		Mode: mode, DecodeTokensPerSecond: x.DecodeTPS.Mean, Stddev: x.DecodeTPS.Stddev, Noise: noiseOf(x),
		HitRate: x.HitRate, PredictorPrecision: x.PredictorPrecision, PredictorRecall: x.PredictorRecall,
		StallFraction: x.StallFraction, BytesReadPerToken: x.BytesPerToken,
		PeakRSSBytes: r.peakRSS, IdenticalOutput: r.identical, DeviceTimeFields: x.DeviceTimeFields,
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

// tpsOf returns the mean decode tok/s of mode's finished run, or 0.
func tpsOf(runs map[expert.Mode]*ladderRun, m expert.Mode) float64 {
	if r := runs[m]; r != nil {
		return r.res.DecodeTPS.Mean
	}
	return 0
}

// openMode opens a session of cfg's model in mode with budget; its peak RSS
// counts from base. With record the store records its routing; the oracle
// mode replays tr (one run's routing, repeated for every run the ladder
// makes).
func openMode(cfg LadderConfig, mode expert.Mode, budget units.Budget, base int64, record bool, tr *expert.RoutingTrace) (*les.Session, error) {
	c := cfg.measure()
	c.Mode, c.Budget, c.Record, c.RSSBase = mode, budget, record, base
	if mode == expert.OracleMode {
		if tr == nil {
			return nil, errors.New("no recorded routing to replay")
		}
		full := &expert.RoutingTrace{}
		for range cfg.Warmup + cfg.Repetitions {
			full.Calls = append(full.Calls, tr.Calls...)
		}
		c.Trace = full
	}
	return measure.OpenSession(*c)
}

// measure is the ladder's config as the one recipe takes it: its storage,
// clock and store options (the mode, budget and trace are the rung's).
func (c *LadderConfig) measure() *measure.Config {
	t := measure.TimeHost
	if c.DeviceTime {
		t = measure.TimeDevice
	}
	return &measure.Config{Model: c.Model, ExpertsPath: c.ExpertsPath, Budget: c.Budget, Profile: c.Profile, Direct: c.Direct, Time: t,
		ComputeSlowdown: c.ComputeSlowdown, Policy: c.Policy, PredictK: c.PredictK, PrefetchAll: c.PrefetchAll, Threads: c.Threads}
}
