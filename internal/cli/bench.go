package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/lesfarm/lesfarm/runtime/bench"
	"github.com/lesfarm/lesfarm/runtime/model"
	"github.com/lesfarm/lesfarm/runtime/spec"
)

func init() { register("bench", newBenchCmd) }

func newBenchCmd(env *Env) *cobra.Command {
	var (
		cfg     bench.Config
		threads string
		format  string
		copyMB  int
		quiet   bool
		lf      *ladderFlags
		draft   string
		draftK  string
	)
	cmd := &cobra.Command{
		Use:   "bench --model PATH",
		Short: "Measure prefill/decode tok/s, weight GB/s and GFLOP/s of a model (resident)",
		Long: `bench loads a GGUF model with all weights in RAM and measures it like
llama-bench: ppN (prefill of N prompt tokens) and tgN (N decode steps), each
--warmup times unmeasured then --repetitions times (t/s: mean ± stddev),
with the weight bandwidth (GB/s, against a memory copy) and GFLOP/s.
--threads 1,2 measures several thread counts. Output: --format md (default),
csv, json or jsonl.

--draft PATH|ngram|mtp measures greedy decode with and without a drafter
(speculative decoding), once per --draft-k (auto: adaptive k).` + ladderHelp,
		Example: `  lesfarm bench --model tiny.gguf
  lesfarm bench --model /tmp/phone.gguf --threads 1,2 --repetitions 3 --gen-tokens 16 --format json
  lesfarm bench --model tiny-moe.gguf --draft tiny-draft.gguf --draft-k 2,4 --threads 1` + ladderExample,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if draft != "" && !lf.ladder {
				return runSpecBench(env, cmd, cfg, threads, draft, draftK, format)
			}
			if draft != "" && lf.noSpec {
				return usagef("--draft chooses the speculative rung's drafter, which --no-speculative skips: give one")
			}
			lf.draft = draft
			if cmd.Flags().Changed("draft-k") {
				if !lf.ladder {
					return usagef("--draft-k needs --draft PATH")
				}
				k, err := parseLadderDraftK(draftK)
				if err != nil {
					return err
				}
				lf.draftK = k
			}
			if lf.ladder {
				ts, err := parseThreads(threads)
				if err != nil {
					return err
				}
				cfg.Threads = ts
				if !quiet {
					cfg.Progress = func(line string) { fmt.Fprintln(env.Stderr, "bench: "+line) }
				}
				return runLadder(env, lf, cfg, format)
			}
			if !slices.Contains(bench.Formats, format) {
				return usagef("--format %q is not supported: use %s", format, strings.Join(bench.Formats, ", "))
			}
			ts, err := parseThreads(threads)
			if err != nil {
				return err
			}
			cfg.Threads = ts
			if cfg.Repetitions < 1 {
				return usagef("--repetitions %d must be at least 1", cfg.Repetitions)
			}
			if cfg.Warmup < 0 || cfg.PromptTokens < 0 || cfg.GenTokens < 0 {
				return usagef("--warmup, --prompt-tokens and --gen-tokens must not be negative")
			}
			if cfg.PromptTokens == 0 && cfg.GenTokens == 0 {
				return usagef("--prompt-tokens and --gen-tokens are both 0: nothing to measure")
			}
			if cfg.Model == "" {
				return usagef("--model is required: give the path of a GGUF model file")
			}
			if _, err := os.Stat(cfg.Model); errors.Is(err, fs.ErrNotExist) {
				return usagef("model file %s does not exist: check the --model path", cfg.Model)
			}
			cfg.CopyBytes = int64(copyMB) << 20
			if !quiet {
				cfg.Progress = func(line string) { fmt.Fprintln(env.Stderr, "bench: "+line) }
			}
			rep, err := bench.Run(env.Ctx, cfg)
			if err != nil {
				if errors.Is(err, model.ErrUnsupported) {
					return &UsageError{Err: err}
				}
				if env.Ctx.Err() != nil {
					return fmt.Errorf("bench: interrupted")
				}
				return err
			}
			return rep.Write(env.Stdout, format)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Model, "model", "", "path of the GGUF model file (required)")
	f.StringVar(&threads, "threads", strconv.Itoa(runtime.NumCPU()), "thread counts, comma-separated (e.g. 1,2)")
	f.IntVar(&cfg.Repetitions, "repetitions", 5, "measured runs per test")
	f.IntVar(&cfg.Warmup, "warmup", 1, "unmeasured warm-up runs per test")
	f.IntVar(&cfg.PromptTokens, "prompt-tokens", 64, "prefill test length (0 = skip)")
	f.IntVar(&cfg.GenTokens, "gen-tokens", 32, "decode test length (0 = skip)")
	f.IntVar(&copyMB, "copy-mb", 512, "buffer size of the memory copy benchmark in MiB (0 = skip)")
	f.StringVar(&format, "format", "md", "output format: md, csv, json or jsonl")
	f.StringVar(&draft, "draft", "", "draft model (GGUF), ngram (prompt lookup) or mtp (the model's MTP block), for speculative decoding: measure decode with and without it")
	f.StringVar(&draftK, "draft-k", "2,4", "with --draft: draft tokens per round to measure, comma-separated; auto = adaptive k")
	f.BoolVar(&quiet, "quiet", false, "no progress lines on stderr")
	f.BoolVar(&cfg.Pin, "pin", false, "pin the measuring thread to one CPU (the highest this process may use) while measuring")
	f.BoolVar(&cfg.DiscardOutliers, "discard-outliers", false, "drop repetitions whose tok/s lies beyond median ± 3·1.4826·MAD (needs >= 3 repetitions); rows report how many were dropped")
	lf = addLadderFlags(f)
	return cmd
}

func parseThreads(s string) ([]int, error) {
	var out []int
	for _, p := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || n < 1 || n > 1024 {
			return nil, usagef("--threads %q: give positive thread counts separated by commas, e.g. 1,2", s)
		}
		out = append(out, n)
	}
	return out, nil
}

// runSpecBench measures speculative decoding against plain greedy decode.
func runSpecBench(env *Env, cmd *cobra.Command, cfg bench.Config, threads, draft, draftK, format string) error {
	if !slices.Contains(bench.Formats, format) {
		return usagef("--format %q is not supported: use %s", format, strings.Join(bench.Formats, ", "))
	}
	if cfg.Model == "" {
		return usagef("--model is required: give the path of a GGUF model file")
	}
	for _, p := range []string{cfg.Model, draft} {
		if p == bench.DraftNGram || p == bench.DraftMTP {
			continue
		}
		if _, err := os.Stat(p); errors.Is(err, fs.ErrNotExist) {
			return usagef("model file %s does not exist: check the path", p)
		}
	}
	ts, err := parseThreads(threads)
	if err != nil {
		return err
	}
	if len(ts) != 1 {
		return usagef("--draft measures one thread count: give --threads N")
	}
	var ks []int
	for _, f := range strings.Split(draftK, ",") {
		if strings.TrimSpace(f) == "auto" {
			ks = append(ks, bench.KAdaptive)
			continue
		}
		k, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || k < 0 || k > 64 {
			return usagef("--draft-k %q: want draft token counts from 1 to 64 or auto (adaptive), or 0 for a second plain row, comma-separated", draftK)
		}
		ks = append(ks, k)
	}
	if cfg.Repetitions < 1 || cfg.Warmup < 0 || cfg.PromptTokens < 1 {
		return usagef("--repetitions must be >= 1, --warmup >= 0 and --prompt-tokens >= 1")
	}
	gen := cfg.GenTokens
	if !cmd.Flags().Changed("gen-tokens") {
		gen = 64
	}
	if gen < 1 {
		return usagef("--gen-tokens must be >= 1")
	}
	rows, err := bench.RunSpec(env.Ctx, bench.SpecConfig{Model: cfg.Model, Draft: draft, Threads: ts[0], Ks: ks,
		Repetitions: cfg.Repetitions, Warmup: cfg.Warmup, PromptTokens: cfg.PromptTokens, GenTokens: gen})
	if err != nil {
		if errors.Is(err, spec.ErrVocabMismatch) || errors.Is(err, model.ErrUnsupported) {
			return &UsageError{Err: err}
		}
		if env.Ctx.Err() != nil {
			return fmt.Errorf("bench: interrupted")
		}
		return err
	}
	return bench.WriteSpecRows(env.Stdout, rows, format)
}
