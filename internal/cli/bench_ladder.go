package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/lesfarm/lesfarm/profile"
	"github.com/lesfarm/lesfarm/runtime/bench"
	"github.com/lesfarm/lesfarm/runtime/expert"
	"github.com/lesfarm/lesfarm/runtime/gguf"
	"github.com/lesfarm/lesfarm/runtime/measure"
	"github.com/lesfarm/lesfarm/runtime/quant"
	"github.com/lesfarm/lesfarm/runtime/routing"
	"github.com/lesfarm/lesfarm/runtime/tokenizer"
	"github.com/lesfarm/lesfarm/runtime/units"
)

// ladderFlags are the bench flags of the LES ladder (bench --ladder).
type ladderFlags struct {
	ladder   bool
	draftK   int // --draft-k with --ladder: a fixed draft length, 0 = adaptive
	profile  string
	storage  string
	budget   string
	experts  string
	policy   string
	modes    string
	noOracle bool
	predictK int
	replay   time.Duration
	record   string
	timeBase string
	all      bool
	noSpec   bool
	cutSlack int
	draft    string // bench --draft: the speculative rung's drafter
	twin     string // --twin-check PROFILE (bench_twin.go)
	// +mixed-precision row
	mixed, mixedExperts, pplFile string
	// reference: recorded tokens to check against; recordRef: where to
	// write an all-resident reference (ladder_reference.go in bench)
	reference, recordRef string
	alone                bool // --one-at-a-time
	routingTokens        int  // --routing-tokens: routing statistics for the header
}

// ladderHelp is bench --help's summary of the ladder; docs/bench.md has
// the rest (columns, JSON fields, clocks, replays, mixed precision).
var ladderHelp = `

--ladder streams experts from the model file through the LES expert store
and measures each mode: naive, on-demand, on-demand-parallel, lookahead,
scheduled and +speculative (--no-speculative skips it; skipped with its
reason on a synth model, whose random weights no drafter predicts), plus the
oracle, the upper bound. Every mode's tokens are checked against a
reference that never needs the whole model in RAM: the tokens of the
on-demand mode under the same budget, or --reference FILE, recorded once
on a machine that holds the model with --record-reference FILE. It needs --expert-budget (bytes, or a fraction of the
expert bytes: 0.2, 20%) and storage: --profile NAME|FILE (built-ins: ` + strings.Join(profile.Builtin(), ", ") + `)
or --storage direct (the real disk, O_DIRECT). A legend of the columns
follows the table; progress shows the time left.

Columns, JSON fields, clocks (--time), replays (--replay-compute), the
+mixed-precision row (--mixed) and the verify cut: docs/bench.md.`

const ladderExample = `
  lesfarm bench --model tiny.gguf --experts tiny.packed.gguf --ladder --profile phone-flagship \
    --expert-budget 0.2 --mixed tiny-mixed.packed.gguf --perplexity-file validation.txt
  lesfarm bench --model /tmp/phone.gguf --experts /tmp/phone.packed.gguf --ladder \
    --profile phone-flagship --expert-budget 0.2 --threads 1 --format json
  lesfarm bench --model /tmp/phone.gguf --ladder --storage direct --expert-budget 600MiB`

func addLadderFlags(f *pflag.FlagSet) *ladderFlags {
	lf := &ladderFlags{}
	f.BoolVar(&lf.ladder, "ladder", false, "measure the LES ladder (experts streamed from storage; see above)")
	f.StringVar(&lf.profile, "profile", "", "ladder storage profile: "+strings.Join(profile.Builtin(), ", ")+", a YAML file, or direct")
	f.StringVar(&lf.storage, "storage", "", "ladder storage: direct = the real disk with O_DIRECT, no emulation")
	f.StringVar(&lf.budget, "expert-budget", "", "ladder expert budget: bytes (e.g. 512MiB) or a fraction of the expert bytes (0.2, 20%)")
	f.StringVar(&lf.experts, "experts", "", "ladder: stream experts from this file (e.g. the packed model) instead of --model")
	f.StringVar(&lf.policy, "cache-policy", "lfu", "ladder cache policy: "+strings.Join(expert.PolicyNames(), ", "))
	f.StringVar(&lf.modes, "modes", "", "ladder modes, comma-separated (default: all, speculative last)")
	f.IntVar(&lf.predictK, "predict-k", 0, "ladder: experts the lookahead modes prefetch per token (0 = three quarters of the model's experts per token, rounded up)")
	f.BoolVar(&lf.noOracle, "no-oracle", false, "ladder: skip the oracle run")
	f.BoolVar(&lf.all, "prefetch-all", false, "ladder: prefetch every prediction the budget allows, without weighing its measured precision against its read and eviction")
	f.BoolVar(&lf.noSpec, "no-speculative", false, "ladder: skip the speculative rung")
	f.IntVar(&lf.cutSlack, "verify-cut-slack", -1, "ladder: end each verify pass at the first draft that would add more than this many expert reads per layer, and prefetch for position 0 only (-1: verify every draft)")
	f.StringVar(&lf.record, "record-trace", "", "ladder: write the routing of the first warm-up run (prefill and decode, with the lookahead predictions) to this file, for lesfarm replay")
	f.StringVar(&lf.timeBase, "time", "", "ladder: device (dilate the emulated flash to the profile's compute speed; default when the profile has a compute section) or host")
	f.StringVar(&lf.mixed, "mixed", "", "ladder: add the +mixed-precision row: this model (lesfarm quantize --budget output) in the scheduled mode, same budget and storage")
	f.StringVar(&lf.mixedExperts, "mixed-experts", "", "ladder: stream the --mixed model's experts from this file (e.g. its packed form)")
	f.StringVar(&lf.pplFile, "perplexity-file", "", "ladder: text whose perplexity the +mixed-precision row reports for --mixed and --model")
	f.StringVar(&lf.twin, "twin-check", "", "ladder on --storage direct: also run every mode on this profile (the host's twin, from profile measure), interleaved, and print direct against twin per row with the error of each part (bytes, stall, compute per token); 'measure' measures the twin in the run and re-measures the disk before every repetition of every row")
	f.BoolVar(&lf.alone, "one-at-a-time", false, "ladder: load, warm up and measure one rung at a time, so the ladder needs one rung's memory (resident weights + budget) — the way to run it under a phone-sized RAM cap — instead of all rungs side by side (which cancels drift between rows)")
	f.StringVar(&lf.reference, "reference", "", "ladder: check every mode's tokens against this recorded reference (from --record-reference on a machine that holds the model; its prompt is used) instead of the on-demand mode's")
	f.StringVar(&lf.recordRef, "record-reference", "", "ladder: make the reference with every expert in RAM (a machine that holds the model) and write it to this file for --reference")
	f.IntVar(&lf.routingTokens, "routing-tokens", 32, "ladder: measure the model's routing for the report header as lesfarm routing-stats does, on this many tokens of each of its built-in prompts (0: skip)")
	f.DurationVar(&lf.replay, "replay-compute", 0, "ladder: record the model's routing once, then replay it through each mode with this emulated compute time per token (e.g. 50ms) instead of running the model")
	return lf
}

// runLadder validates the ladder flags and runs it.
func runLadder(env *Env, lf *ladderFlags, cfg bench.Config, format string) error {
	if cfg.Model == "" {
		return usagef("--model is required: give the path of a GGUF model file")
	}
	if _, err := os.Stat(cfg.Model); errors.Is(err, fs.ErrNotExist) {
		return usagef("model file %s does not exist: check the --model path", cfg.Model)
	}
	if !slices.Contains(bench.Formats, format) {
		return usagef("--format %q is not supported: use %s", format, strings.Join(bench.Formats, ", "))
	}
	lc := bench.LadderConfig{
		Model: cfg.Model, ExpertsPath: lf.experts, Policy: lf.policy, NoOracle: lf.noOracle, PredictK: lf.predictK, RecordTrace: lf.record, PrefetchAll: lf.all,
		NoSpeculative: lf.noSpec, Draft: lf.draft, DraftK: lf.draftK, VerifyCut: lf.cutSlack >= 0, VerifyCutSlack: max(lf.cutSlack, 0),
		Repetitions: cfg.Repetitions, Warmup: cfg.Warmup, PromptTokens: cfg.PromptTokens, GenTokens: cfg.GenTokens,
		Pin: cfg.Pin, DiscardOutliers: cfg.DiscardOutliers, OneAtATime: lf.alone,
	}
	if len(cfg.Threads) != 1 {
		return usagef("--ladder measures one thread count: give --threads N")
	}
	lc.Threads = cfg.Threads[0]
	direct, prof, err := resolveStorage(lf.profile, lf.storage)
	if err != nil {
		return err
	}
	if !direct && prof == nil {
		return usagef("--ladder needs --profile NAME|FILE|direct (built-ins: %s) or --storage direct", strings.Join(profile.Builtin(), ", "))
	}
	lc.Direct, lc.Profile = direct, prof
	tb, err := measure.ParseTime(lf.timeBase)
	if err != nil {
		return usagef("--time: %v", err)
	}
	if lf.replay != 0 {
		// A replay emulates its own compute time: host time unless asked.
		if tb == measure.TimeDevice {
			return usagef("--time device and --replay-compute conflict: a replay emulates its own compute time")
		}
		tb = measure.TimeHost
	}
	// The clock rule is measure's, the farm's: device time when the
	// profile declares its compute.
	if lc.DeviceTime, err = (&measure.Config{Profile: prof, Direct: direct, Time: tb}).DeviceTime(); err != nil {
		return usagef("--time device: %v", err)
	}
	if lf.budget == "" {
		return usagef("--ladder needs --expert-budget: bytes (e.g. 512MiB) or a fraction of the expert bytes (e.g. 0.2)")
	}
	if lc.Budget, err = units.ParseBudget(lf.budget); err != nil {
		return usagef("--expert-budget: %v", err)
	}
	if _, err := expert.NewPolicy(lf.policy); err != nil {
		return usagef("--cache-policy: %v", err)
	}
	askedSpec := lf.draft != "" // a drafter given, or speculative listed in --modes
	if lf.modes != "" {
		// Listed modes only: the speculative rung when it is listed.
		lc.NoSpeculative = true
		for _, s := range strings.Split(lf.modes, ",") {
			if strings.TrimSpace(s) == bench.SpeculativeRow {
				lc.NoSpeculative = lf.noSpec
				askedSpec = true
				continue
			}
			m, err := expert.ParseMode(strings.TrimSpace(s))
			if err != nil || m == expert.OracleMode {
				return usagef("--modes: %q is not a ladder mode (use naive, on-demand, on-demand-parallel, lookahead, scheduled, speculative)", s)
			}
			lc.Modes = append(lc.Modes, m)
		}
		if len(lc.Modes) == 0 {
			lc.Modes = []expert.Mode{expert.Scheduled} // speculative alone: on scheduled
		}
	}
	if lf.predictK < 0 {
		return usagef("--predict-k must be >= 0 (0 = the default)")
	}
	if lc.PromptTokens < 1 || lc.GenTokens < 2 {
		return usagef("--ladder needs --prompt-tokens >= 1 and --gen-tokens >= 2")
	}
	if err := mixedFlags(lf, &lc); err != nil {
		return err
	}
	if err := referenceFlags(lf, &lc); err != nil {
		return err
	}
	var specNote string
	if !lc.NoSpeculative && !askedSpec && syntheticModel(cfg.Model) {
		lc.NoSpeculative, specNote = true, syntheticSpecNote(cfg.Model)
		fmt.Fprintln(env.Stderr, "bench: "+specNote)
	}
	if cfg.Progress != nil {
		eta := newLadderETA(time.Now, aloneRungs(&lc))
		lc.Progress = func(line string) { cfg.Progress(eta.line(line)) }
	}
	if lf.twin != "" {
		return runTwinCheck(env, lf, lc, format)
	}
	var rep *bench.LadderReport
	if lf.replay != 0 {
		if lf.replay < 0 {
			return usagef("--replay-compute %v must be positive", lf.replay)
		}
		if lf.mixed != "" {
			return usagef("--mixed runs the planner's model and cannot be replayed: drop --replay-compute or --mixed")
		}
		if lf.record != "" {
			return usagef("--record-trace records the model's own run: give it without --replay-compute")
		}
		rep, err = bench.RunReplay(env.Ctx, bench.ReplayConfig{LadderConfig: lc, Compute: lf.replay})
	} else {
		rep, err = bench.RunLadder(env.Ctx, lc)
	}
	if err == nil {
		rep.Routing = synthRouting(cfg.Model)
		rep.RoutingStats = ladderRoutingStats(env, cfg.Model, lf.routingTokens, lc.Threads)
	}
	if err != nil {
		if errors.Is(err, expert.ErrBudgetTooSmall) {
			return usagef("--expert-budget: %v", err)
		}
		if env.Ctx.Err() != nil {
			return fmt.Errorf("bench: interrupted")
		}
		return err
	}
	if lf.recordRef != "" {
		if err := rep.Reference.WriteFile(lf.recordRef); err != nil {
			return fmt.Errorf("bench: --record-reference: %w", err)
		}
		fmt.Fprintf(env.Stderr, "bench: reference (%d tokens, all-resident) written to %s; give it to --reference where the model does not fit\n", len(rep.Reference.Tokens), lf.recordRef)
	}
	if err := rep.Write(env.Stdout, format); err != nil {
		return err
	}
	if format == "md" {
		if specNote != "" {
			fmt.Fprintf(env.Stdout, "\n%s.\n", specNote)
		}
		_, err = fmt.Fprint(env.Stdout, ladderLegend)
	}
	return err
}

// mixedFlags checks the +mixed-precision flags and tokenizes the
// perplexity text with the reference model's tokenizer.
func mixedFlags(lf *ladderFlags, lc *bench.LadderConfig) error {
	if lf.mixed == "" {
		if lf.mixedExperts != "" || lf.pplFile != "" {
			return usagef("--mixed-experts and --perplexity-file belong to the +mixed-precision row: add --mixed PATH")
		}
		return nil
	}
	for _, p := range []string{lf.mixed, lf.mixedExperts} {
		if p == "" {
			continue
		}
		if _, err := os.Stat(p); err != nil {
			return usagef("--mixed model %s: %v: check the path", p, err)
		}
	}
	if quant.SamePath(lf.mixed, lc.Model) {
		return usagef("--mixed %s is the reference --model: give the planner's model (lesfarm quantize --budget)", lf.mixed)
	}
	lc.Mixed, lc.MixedExperts = lf.mixed, lf.mixedExperts
	if lf.pplFile == "" {
		return nil
	}
	text, err := os.ReadFile(lf.pplFile)
	if err != nil {
		return usagef("--perplexity-file: %v: check the path", err)
	}
	if len(strings.TrimSpace(string(text))) == 0 {
		return usagef("--perplexity-file %s is empty: give a text of at least 257 tokens", lf.pplFile)
	}
	f, err := gguf.Open(lc.Model)
	if err != nil {
		return usagef("%v", err)
	}
	defer f.Close()
	tok, err := tokenizer.FromGGUF(f)
	if err != nil {
		return usagef("model %s has no usable tokenizer (%v) to read --perplexity-file", lc.Model, err)
	}
	lc.PerplexityIDs = tok.Tokenize(string(text), true, false)
	return nil
}

// parseLadderDraftK parses --draft-k for the ladder's speculative rung: one
// draft length from 1 to 64, or auto (adaptive k, 0).
func parseLadderDraftK(v string) (int, error) {
	if v == "auto" {
		return 0, nil
	}
	k, err := strconv.Atoi(v)
	if err != nil || k < 1 || k > 64 {
		return 0, usagef("--draft-k %q with --ladder: give one draft length from 1 to 64, or auto (adaptive k)", v)
	}
	return k, nil
}

// ladderRoutingStats measures the routing of the model at path over all
// layers as routing-stats does (its built-in prompts, tokens of each), for
// the ladder report's header; nil when tokens < 2 or the measurement
// fails (said on stderr: the ladder's own figures stand without it).
func ladderRoutingStats(env *Env, path string, tokens, threads int) *routing.Metrics {
	if tokens < 2 {
		return nil
	}
	st, _, err := modelRoutingStats(env, path, "", tokens, threads)
	if err != nil {
		fmt.Fprintf(env.Stderr, "bench: routing statistics: %v\n", err)
		return nil
	}
	return &st.Overall
}
