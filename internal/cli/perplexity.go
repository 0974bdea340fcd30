package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/lesfarm/lesfarm/runtime/perplexity"
)

func init() { register("perplexity", newPerplexityCmd) }

func newPerplexityCmd(env *Env) *cobra.Command {
	var (
		modelPath, file, format, method string
		ctxLen, chunks, threads         int
	)
	cmd := &cobra.Command{
		Use:   "perplexity --model PATH --file TEXT",
		Short: "Measure a model's perplexity on a text file, as llama.cpp's perplexity tool does",
		Long: `Perplexity tokenizes --file (as llama.cpp does: with BOS if the model adds
one) and computes ppl = exp(mean negative log-likelihood) of the tokens the
method scores. Every window is evaluated from an empty cache at positions
0..ctx-1, and the log-softmax is taken in float64 over the full vocabulary.

Methods:
  llama.cpp (default)  llama.cpp's perplexity tool: consecutive windows of
                       --ctx tokens (stride --ctx, full windows only, at least
                       two); each window's first token becomes BOS if the
                       model adds BOS; only the second half is scored: the
                       logits at positions ctx/2 .. ctx-2 predict the next
                       token (ctx-1-ctx/2 tokens per window).
  windows              non-overlapping windows of --ctx tokens from index 0;
                       every position 0..ctx-1 is scored, the token after the
                       window being the target of its last position; only
                       windows whose last target exists. This is how the
                       trained fixture's reference (ref.json,
                       perplexity_method) was computed, with --ctx 256.

--ctx defaults to the model's context length (llama.cpp's -c 0). --chunks N
evaluates only the first N windows (llama.cpp's --chunks).

--format json prints one object:
  {"ppl","mean_nll","method","context","stride","score_first","score_last",
   "windows","tokens_scored","tokens"}
where score_first..score_last are the scored positions within each window.`,
		Example: `  lesfarm perplexity --model tiny-moe-kjv-f16.gguf --file validation.txt
  lesfarm perplexity --model tiny-moe-kjv-f16.gguf --file validation.txt --method windows --ctx 256 --format json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if format != "text" && format != "json" {
				return usagef("--format %q is not supported: use text or json", format)
			}
			meth, err := perplexity.ParseMethod(method)
			if err != nil {
				return usagef("--method %q is not supported: use llama.cpp or windows", method)
			}
			if file == "" {
				return usagef("--file is required: give the text file to score")
			}
			text, err := os.ReadFile(file)
			if errors.Is(err, fs.ErrNotExist) {
				return usagef("text file %s does not exist: check the --file path", file)
			}
			if err != nil {
				return usagef("cannot read --file %s: %v", file, err)
			}
			if len(text) == 0 {
				return usagef("text file %s is empty: give a text to score", file)
			}
			if ctxLen < 0 || ctxLen == 1 {
				return usagef("--ctx %d must be at least 2 (0 = the model's context length)", ctxLen)
			}
			if chunks < 0 {
				return usagef("--chunks %d must be >= 0 (0 = all windows)", chunks)
			}
			m, tok, err := openModel(modelPath, threads)
			if err != nil {
				return err
			}
			defer m.Close()
			if ctxLen > m.Context {
				return usagef("--ctx %d exceeds the model's context length %d: give --ctx %d or less", ctxLen, m.Context, m.Context)
			}
			ids := tok.Tokenize(string(text), true, false)
			bos := -1
			if tok.AddBOS() {
				bos = tok.BOS()
			}
			res, err := perplexity.Run(env.Ctx, m, ids, perplexity.Config{Method: meth, Context: ctxLen, MaxWindows: chunks, BOS: bos})
			if err != nil {
				if errors.Is(err, perplexity.ErrTooShort) {
					return &UsageError{Err: err}
				}
				if env.Ctx.Err() != nil {
					return fmt.Errorf("perplexity: interrupted")
				}
				return err
			}
			if format == "json" {
				enc := json.NewEncoder(env.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(res)
			}
			fmt.Fprintf(env.Stdout, "ppl %.4f (mean NLL %.6f nats/token) over %d tokens of %d\n", res.PPL, res.MeanNLL, res.TokensScored, res.Tokens)
			fmt.Fprintf(env.Stdout, "method %s: %d windows, context %d, stride %d, scoring window positions %d..%d\n", res.Method, res.Windows, res.Context, res.Stride, res.ScoreFirst, res.ScoreLast)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&modelPath, "model", "", "GGUF model file (required)")
	f.StringVar(&file, "file", "", "text file to score (required)")
	f.StringVar(&format, "format", "text", "output format: text or json")
	f.StringVar(&method, "method", string(perplexity.MethodLlamaCpp), "llama.cpp (second half of each window) or windows (every position, ref.json's method)")
	f.IntVar(&ctxLen, "ctx", 0, "window length in tokens (0 = the model's context length)")
	f.IntVar(&chunks, "chunks", 0, "evaluate at most this many windows (0 = all)")
	f.IntVar(&threads, "threads", runtime.NumCPU(), "threads for matrix products")
	return cmd
}
