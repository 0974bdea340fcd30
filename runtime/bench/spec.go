package bench

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/lesfarm/lesfarm/runtime/generate"
	"github.com/lesfarm/lesfarm/runtime/les"
	"github.com/lesfarm/lesfarm/runtime/model"
	"github.com/lesfarm/lesfarm/runtime/spec"
	"github.com/lesfarm/lesfarm/runtime/stat"
)

// SpecConfig configures RunSpec: decode throughput of a model with and
// without a speculative draft, side by side.
type SpecConfig struct {
	// Model is the target's GGUF path; Draft the draft model's,
	// DraftNGram for the model-free n-gram drafter or DraftMTP for the
	// target's MTP block (both required).
	Model, Draft string
	Threads      int // threads for matrix products (default 1)
	// Ks are the draft tokens per round to measure (default 2, 4);
	// KAdaptive measures adaptive k (up to spec.AdaptiveMaxK).
	Ks          []int
	Repetitions int // measured runs per row (default 5)
	Warmup      int // unmeasured runs before them (default 1)
	// PromptIDs is the prompt; when empty, PromptTokens (default 32)
	// pseudo-random ids, as the tg rows of Run use.
	PromptIDs    []int
	PromptTokens int
	GenTokens    int // tokens to generate per run (default 64)
}

// DraftNGram as SpecConfig.Draft selects the n-gram (prompt lookup)
// drafter instead of a draft model.
const DraftNGram = "ngram"

// DraftMTP as SpecConfig.Draft drafts with the target's own MTP/NextN
// block (a model that has one).
const DraftMTP = "mtp"

// KAdaptive in SpecConfig.Ks measures adaptive draft lengths.
const KAdaptive = -1

// SpecRow is one llama-bench style row of RunSpec: plain greedy decoding
// (K = 0) or speculative decoding with K draft tokens per round.
type SpecRow struct {
	Model     string    `json:"model"`
	Draft     string    `json:"draft,omitempty"`
	Threads   int       `json:"threads"`
	Test      string    `json:"test"` // "tg64" or "tg64+draft"
	K         int       `json:"k"`
	Tokens    int       `json:"n_tokens"`
	Reps      int       `json:"repetitions"`
	TPS       float64   `json:"tokens_per_second"` // decode tokens over decode wall time
	TPSStddev float64   `json:"stddev"`
	TPSCV     float64   `json:"cv"` // TPSStddev / TPS
	Samples   []float64 `json:"samples"`
	// Speedup is TPS over the plain row's TPS.
	Speedup             float64 `json:"speedup"`
	AcceptanceRate      float64 `json:"acceptance_rate,omitempty"`
	TokensPerTargetPass float64 `json:"tokens_per_target_pass,omitempty"`
	// Adaptive rows choose k per round up to K. MeanAccepted is the
	// accepted length of rounds that drafted, VerifyUS the mean target
	// pass in µs, ExpertsPerVerify the mean (layer, expert) union of a
	// pass, OffShare the share of rounds adaptive k decoded plainly.
	// CPUTPS is decode tokens per CPU-second of the process (from the
	// first generated token on), CPUSpeedup its ratio to the plain row:
	// the figures that hold on a machine shared with other work.
	CPUTPS     float64 `json:"tokens_per_cpu_second"`
	CPUSpeedup float64 `json:"cpu_speedup"`
	// PairedCPUSpeedup is the geometric mean over repetitions of the
	// row's tokens per CPU-second over the plain row's in the same
	// repetition (run next to it; odd repetitions run the rows in reverse
	// order), PairedCILow and PairedCIHigh its 95% confidence interval:
	// the figure to compare with 1 on a loaded machine.
	PairedCPUSpeedup float64   `json:"paired_cpu_speedup,omitempty"`
	PairedCILow      float64   `json:"paired_ci_low,omitempty"`
	PairedCIHigh     float64   `json:"paired_ci_high,omitempty"`
	CPUSamples       []float64 `json:"cpu_samples,omitempty"` // tokens per CPU-second of each repetition
	Adaptive         bool      `json:"adaptive,omitempty"`
	MeanAccepted     float64   `json:"mean_accepted,omitempty"`
	VerifyUS         float64   `json:"verify_us,omitempty"`
	ExpertsPerVerify float64   `json:"experts_per_verify,omitempty"`
	OffShare         float64   `json:"off_share,omitempty"`
}

// RunSpec loads both models and measures decode with and without the
// draft. Runs are interleaved (plain, K1, K2, …, plain, …) so a noisy
// machine affects every row alike. The speculative tokens are checked
// against the plain ones; a difference is an error.
func RunSpec(ctx context.Context, cfg SpecConfig) ([]SpecRow, error) {
	if cfg.Model == "" || cfg.Draft == "" {
		return nil, fmt.Errorf("bench: a model and a draft model are required")
	}
	if cfg.Threads <= 0 {
		cfg.Threads = 1
	}
	if len(cfg.Ks) == 0 {
		cfg.Ks = []int{2, 4}
	}
	if cfg.Repetitions <= 0 {
		cfg.Repetitions = 5
	}
	if cfg.Warmup < 0 {
		cfg.Warmup = 0
	}
	if cfg.GenTokens <= 0 {
		cfg.GenTokens = 64
	}
	if cfg.PromptTokens <= 0 {
		cfg.PromptTokens = 32
	}
	target, err := model.Load(cfg.Model, model.Options{Threads: cfg.Threads})
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	defer target.Close()
	var drafter spec.Drafter = &spec.NGramDrafter{}
	draftName := DraftNGram
	var dec *spec.Decoder
	switch cfg.Draft {
	case DraftNGram:
	case DraftMTP:
		if dec, err = spec.NewMTP(target); err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
		draftName = DraftMTP
	default:
		draft, err := model.Load(cfg.Draft, model.Options{Threads: cfg.Threads})
		if err != nil {
			return nil, fmt.Errorf("bench: draft: %w", err)
		}
		defer draft.Close()
		if drafter, err = spec.NewModelDrafter(target, draft); err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
		draftName = modelName(draft, cfg.Draft)
	}
	if dec == nil {
		if dec, err = spec.NewWithDrafter(target, drafter); err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
	}
	prompt := cfg.PromptIDs
	if len(prompt) == 0 {
		prompt = make([]int, cfg.PromptTokens)
		x := uint64(0x9e3779b97f4a7c15)
		for i := range prompt {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
			prompt[i] = int(x % uint64(target.Vocab))
		}
	}
	if len(prompt)+cfg.GenTokens > target.Context {
		return nil, fmt.Errorf("bench: %d prompt + %d generated tokens exceed the context length %d of the model; lower the token counts", len(prompt), cfg.GenTokens, target.Context)
	}
	st, err := target.NewState(len(prompt) + cfg.GenTokens)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	ks := append([]int{0}, cfg.Ks...)
	rows := make([]SpecRow, len(ks))
	stats := make([]spec.Stats, len(ks))
	test := fmt.Sprintf("tg%d", cfg.GenTokens)
	for i, k := range ks {
		rows[i] = SpecRow{Model: modelName(target, cfg.Model), Threads: cfg.Threads, Test: test, K: k, Tokens: cfg.GenTokens, Reps: cfg.Repetitions}
		if k == KAdaptive {
			rows[i].K, rows[i].Adaptive = spec.AdaptiveMaxK, true
		}
		if k != 0 {
			rows[i].Draft, rows[i].Test = draftName, test+"+draft"
		}
	}
	var want []int
	cpuSteps := make([]int, len(ks))
	cpuTime := make([]float64, len(ks))
	var cpuFirst time.Duration
	first := true
	onTok := func(int) error {
		if first {
			cpuFirst, first = processCPU(), false
		}
		return nil
	}
	for rep := range cfg.Warmup + cfg.Repetitions {
		for j := range ks {
			// Odd repetitions run the rows in reverse order, so a row
			// that gains from running after (or before) another one does
			// not do so every time. The warm-up keeps the order: plain
			// runs first and sets the tokens the others are checked with.
			i := j
			if rep >= cfg.Warmup && (rep-cfg.Warmup)%2 == 1 {
				i = len(ks) - 1 - j
			}
			k := ks[i]
			var res *generate.Result
			first = true
			if k == 0 {
				if res, err = generate.Run(ctx, target, generate.Params{PromptIDs: prompt, MaxTokens: cfg.GenTokens, State: st, OnToken: onTok}); err != nil {
					return nil, fmt.Errorf("bench: %w", err)
				}
				want = res.TokenIDs
			} else {
				r, err := dec.Run(ctx, spec.Params{PromptIDs: prompt, MaxTokens: cfg.GenTokens, K: rows[i].K, Adaptive: rows[i].Adaptive, OnToken: onTok})
				if err != nil {
					return nil, fmt.Errorf("bench: %w", err)
				}
				if fmt.Sprint(r.TokenIDs) != fmt.Sprint(want) {
					return nil, fmt.Errorf("bench: speculative decoding with K=%d gave other tokens than plain greedy decoding; this is a runtime bug", k)
				}
				res = &r.Result
				if rep >= cfg.Warmup {
					stats[i].Add(&r.Spec)
				}
			}
			if rep >= cfg.Warmup {
				rows[i].Samples = append(rows[i].Samples, les.DecodeTPS(les.RepOf(res)))
				cpu := (processCPU() - cpuFirst).Seconds()
				cpuSteps[i] += res.DecodeSteps
				cpuTime[i] += cpu
				if cpu > 0 {
					rows[i].CPUSamples = append(rows[i].CPUSamples, float64(res.DecodeSteps)/cpu)
				}
			}
		}
	}
	for i := range rows {
		r := &rows[i]
		sum := stat.Summarize(r.Samples)
		r.TPS, r.TPSStddev, r.TPSCV = sum.Mean, sum.Stddev, sum.CV
		if rows[0].TPS > 0 {
			r.Speedup = r.TPS / rows[0].TPS
		}
		if cpuTime[i] > 0 {
			r.CPUTPS = float64(cpuSteps[i]) / cpuTime[i]
		}
		if rows[0].CPUTPS > 0 {
			r.CPUSpeedup = r.CPUTPS / rows[0].CPUTPS
		}
		if i > 0 && len(r.CPUSamples) == len(rows[0].CPUSamples) {
			ratios := make([]float64, len(r.CPUSamples))
			for j, x := range r.CPUSamples {
				ratios[j] = x / rows[0].CPUSamples[j]
			}
			r.PairedCPUSpeedup, r.PairedCILow, r.PairedCIHigh = pairedRatio(ratios)
		}
		if r.Draft != "" {
			s := &stats[i]
			r.AcceptanceRate, r.TokensPerTargetPass = s.AcceptanceRate(), s.TokensPerTargetPass()
			r.MeanAccepted, r.VerifyUS, r.ExpertsPerVerify = s.MeanAccepted(), float64(s.MeanVerify().Nanoseconds())/1e3, s.MeanExpertsPerVerify()
			if s.Rounds > 0 {
				r.OffShare = float64(s.Off) / float64(s.Rounds)
			}
		}
	}
	return rows, nil
}

// WriteSpecRows writes RunSpec's rows as a markdown table (llama-bench
// style), CSV, a JSON array or JSON lines (one row per line).
func WriteSpecRows(w io.Writer, rows []SpecRow, format string) error {
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	case "jsonl":
		enc := json.NewEncoder(w)
		for _, r := range rows {
			if err := enc.Encode(r); err != nil {
				return err
			}
		}
		return nil
	case "csv":
		cw := csv.NewWriter(w)
		_ = cw.Write([]string{"model", "draft", "threads", "test", "k", "n_tokens", "repetitions", "tokens_per_second", "stddev", "speedup", "acceptance_rate", "tokens_per_target_pass",
			"adaptive", "mean_accepted", "verify_us", "experts_per_verify", "off_share", "tokens_per_cpu_second", "cpu_speedup", "cv",
			"paired_cpu_speedup", "paired_ci_low", "paired_ci_high"})
		for _, r := range rows {
			f := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
			_ = cw.Write([]string{r.Model, r.Draft, strconv.Itoa(r.Threads), r.Test, strconv.Itoa(r.K), strconv.Itoa(r.Tokens), strconv.Itoa(r.Reps),
				f(r.TPS), f(r.TPSStddev), f(r.Speedup), f(r.AcceptanceRate), f(r.TokensPerTargetPass),
				strconv.FormatBool(r.Adaptive), f(r.MeanAccepted), f(r.VerifyUS), f(r.ExpertsPerVerify), f(r.OffShare), f(r.CPUTPS), f(r.CPUSpeedup), f(r.TPSCV),
				f(r.PairedCPUSpeedup), f(r.PairedCILow), f(r.PairedCIHigh)})
		}
		cw.Flush()
		return cw.Error()
	case "md", "markdown", "":
	default:
		return fmt.Errorf("bench: format %q is not supported: use md, csv, json or jsonl", format)
	}
	var b strings.Builder
	b.WriteString("| model | draft | threads | test | k | t/s | cv | n | speedup | t/CPU-s | speedup (CPU) | paired (CPU, 95% CI) | acceptance | tokens/pass | verify µs | experts/verify | off |\n")
	b.WriteString("| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, r := range rows {
		draft, acc, tpp, ver, exp, off, paired := "—", "—", "1.00", "—", "—", "—", "—"
		if r.PairedCPUSpeedup > 0 {
			paired = fmt.Sprintf("%.3f× [%.3f, %.3f]", r.PairedCPUSpeedup, r.PairedCILow, r.PairedCIHigh)
		}
		k := strconv.Itoa(r.K)
		if r.Adaptive {
			k = "auto≤" + k
			off = fmt.Sprintf("%.0f%%", 100*r.OffShare)
		}
		if r.Draft != "" {
			draft, acc, tpp = r.Draft, fmt.Sprintf("%.3f", r.AcceptanceRate), fmt.Sprintf("%.2f", r.TokensPerTargetPass)
			ver, exp = fmt.Sprintf("%.0f", r.VerifyUS), fmt.Sprintf("%.1f", r.ExpertsPerVerify)
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %s | %s | %.2f ± %.2f | %.1f%% | %d | %.2f× | %.2f | %.2f× | %s | %s | %s | %s | %s | %s |\n",
			r.Model, draft, r.Threads, r.Test, k, r.TPS, r.TPSStddev, 100*r.TPSCV, len(r.Samples), r.Speedup, r.CPUTPS, r.CPUSpeedup, paired, acc, tpp, ver, exp, off)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
