package bench

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/lesfarm/lesfarm/runtime/generate"
	"github.com/lesfarm/lesfarm/runtime/model"
	"github.com/lesfarm/lesfarm/runtime/spec"
)

// SpecConfig configures RunSpec: decode throughput of a model with and
// without a speculative draft, side by side.
type SpecConfig struct {
	Model, Draft string // GGUF paths (required)
	Threads      int    // threads for matrix products (default 1)
	Ks           []int  // draft tokens per round to measure (default 2, 4)
	Repetitions  int    // measured runs per row (default 5)
	Warmup       int    // unmeasured runs before them (default 1)
	// PromptIDs is the prompt; when empty, PromptTokens (default 32)
	// pseudo-random ids, as the tg rows of Run use.
	PromptIDs    []int
	PromptTokens int
	GenTokens    int // tokens to generate per run (default 64)
}

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
	Samples   []float64 `json:"samples"`
	// Speedup is TPS over the plain row's TPS.
	Speedup             float64 `json:"speedup"`
	AcceptanceRate      float64 `json:"acceptance_rate,omitempty"`
	TokensPerTargetPass float64 `json:"tokens_per_target_pass,omitempty"`
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
	draft, err := model.Load(cfg.Draft, model.Options{Threads: cfg.Threads})
	if err != nil {
		return nil, fmt.Errorf("bench: draft: %w", err)
	}
	defer draft.Close()
	dec, err := spec.New(target, draft)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
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
		if k > 0 {
			rows[i].Draft, rows[i].Test = modelName(draft, cfg.Draft), test+"+draft"
		}
	}
	var want []int
	for rep := range cfg.Warmup + cfg.Repetitions {
		for i, k := range ks {
			var res *generate.Result
			if k == 0 {
				if res, err = generate.Run(ctx, target, generate.Params{PromptIDs: prompt, MaxTokens: cfg.GenTokens, State: st}); err != nil {
					return nil, fmt.Errorf("bench: %w", err)
				}
				want = res.TokenIDs
			} else {
				r, err := dec.Run(ctx, spec.Params{PromptIDs: prompt, MaxTokens: cfg.GenTokens, K: k})
				if err != nil {
					return nil, fmt.Errorf("bench: %w", err)
				}
				if fmt.Sprint(r.TokenIDs) != fmt.Sprint(want) {
					return nil, fmt.Errorf("bench: speculative decoding with K=%d gave other tokens than plain greedy decoding; this is a runtime bug", k)
				}
				res = &r.Result
				if rep >= cfg.Warmup {
					s := &stats[i]
					s.Rounds += r.Spec.Rounds
					s.Drafted += r.Spec.Drafted
					s.Accepted += r.Spec.Accepted
					s.Generated += r.Spec.Generated
				}
			}
			if rep >= cfg.Warmup {
				rows[i].Samples = append(rows[i].Samples, res.DecodeTokensPerSecond())
			}
		}
	}
	for i := range rows {
		r := &rows[i]
		r.TPS, r.TPSStddev = meanStd(r.Samples)
		if rows[0].TPS > 0 {
			r.Speedup = r.TPS / rows[0].TPS
		}
		if r.K > 0 {
			r.AcceptanceRate, r.TokensPerTargetPass = stats[i].AcceptanceRate(), stats[i].TokensPerTargetPass()
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
		_ = cw.Write([]string{"model", "draft", "threads", "test", "k", "n_tokens", "repetitions", "tokens_per_second", "stddev", "speedup", "acceptance_rate", "tokens_per_target_pass"})
		for _, r := range rows {
			f := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
			_ = cw.Write([]string{r.Model, r.Draft, strconv.Itoa(r.Threads), r.Test, strconv.Itoa(r.K), strconv.Itoa(r.Tokens), strconv.Itoa(r.Reps),
				f(r.TPS), f(r.TPSStddev), f(r.Speedup), f(r.AcceptanceRate), f(r.TokensPerTargetPass)})
		}
		cw.Flush()
		return cw.Error()
	case "md", "markdown", "":
	default:
		return fmt.Errorf("bench: format %q is not supported: use md, csv, json or jsonl", format)
	}
	var b strings.Builder
	b.WriteString("| model | draft | threads | test | k | t/s | speedup | acceptance | tokens/pass |\n")
	b.WriteString("| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |\n")
	for _, r := range rows {
		draft, acc, tpp := "—", "—", "1.00"
		if r.K > 0 {
			draft, acc, tpp = r.Draft, fmt.Sprintf("%.3f", r.AcceptanceRate), fmt.Sprintf("%.2f", r.TokensPerTargetPass)
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %s | %d | %.2f ± %.2f | %.2f× | %s | %s |\n",
			r.Model, draft, r.Threads, r.Test, r.K, r.TPS, r.TPSStddev, r.Speedup, acc, tpp)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
