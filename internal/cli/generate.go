package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/lesfarm/lesfarm/runtime/generate"
	"github.com/lesfarm/lesfarm/runtime/model"
	"github.com/lesfarm/lesfarm/runtime/sample"
	"github.com/lesfarm/lesfarm/runtime/tokenizer"
)

func init() { register("generate", newGenerateCmd) }

// generateJSON is the --format json output (issue 3 contract: these fields,
// these names).
type generateJSON struct {
	PromptTokenIDs []int   `json:"prompt_token_ids"`
	TokenIDs       []int   `json:"token_ids"`
	Text           string  `json:"text"`
	PrefillTPS     float64 `json:"prefill_tokens_per_second"`
	DecodeTPS      float64 `json:"decode_tokens_per_second"`
	TTFTms         float64 `json:"ttft_ms"`
}

func newGenerateCmd(env *Env) *cobra.Command {
	var (
		modelPath, prompt, format string
		maxTokens, threads, topK  int
		temperature, topP         float64
		seed                      uint64
	)
	cmd := &cobra.Command{
		Use:   "generate --model PATH --prompt TEXT [--max-tokens N]",
		Short: "Generate text with the LES runtime from a GGUF model (all weights in RAM)",
		Long: `Generate runs a GGUF model (qwen3moe or qwen3) on a prompt: batched prefill,
then token-by-token decoding until an end-of-generation token or --max-tokens.

--temperature 0 (the default) is greedy decoding (argmax, ties to the lowest
id), which reproduces llama.cpp's greedy output. A positive temperature samples,
optionally restricted by --top-k and --top-p; --seed makes sampling repeatable.

With --format text the generated text streams to stdout and the timings go to
stderr. With --format json one object is printed:
  {"prompt_token_ids":[...],"token_ids":[...],"text":"...",
   "prefill_tokens_per_second":x,"decode_tokens_per_second":y,"ttft_ms":z}`,
		Example: `  lesfarm generate --model tiny.gguf --prompt "In the beginning" --max-tokens 32
  lesfarm generate --model tiny.gguf --prompt "Once upon a time" --temperature 0.8 --seed 7 --format json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if format != "text" && format != "json" {
				return usagef("--format %q is not supported: use text or json", format)
			}
			if prompt == "" {
				return usagef("--prompt is required: give the text to continue")
			}
			if maxTokens <= 0 {
				return usagef("--max-tokens %d must be at least 1", maxTokens)
			}
			sp := sample.Params{Temperature: temperature, TopK: topK, TopP: topP, Seed: seed}
			if err := sp.Validate(); err != nil {
				return usagef("%v: fix --temperature, --top-k or --top-p", err)
			}
			m, tok, err := openModel(modelPath, threads)
			if err != nil {
				return err
			}
			defer m.Close()
			ids := tok.Tokenize(prompt, true, false)
			if len(ids) == 0 {
				return usagef("--prompt tokenizes to no tokens: give a non-empty prompt")
			}
			if len(ids) > m.Context {
				return usagef("prompt is %d tokens but the model's context length is %d: shorten --prompt", len(ids), m.Context)
			}
			p := generate.Params{PromptIDs: ids, MaxTokens: maxTokens, Sampling: sp, IsEOG: tok.IsEOG}
			var printed []byte // bytes of generated text already written
			var gen []int
			if format == "text" {
				p.OnToken = func(id int) error {
					if tok.IsEOG(id) {
						return nil
					}
					gen = append(gen, id)
					s := tok.Decode(gen)
					// Hold back an incomplete UTF-8 sequence at the end.
					end := len(s)
					for end > len(printed) && !utf8.ValidString(s[len(printed):end]) {
						end--
					}
					if end > len(printed) {
						fmt.Fprint(env.Stdout, s[len(printed):end])
						printed = []byte(s[:end])
					}
					return nil
				}
			}
			res, err := generate.Run(env.Ctx, m, p)
			if err != nil {
				if env.Ctx.Err() != nil {
					return fmt.Errorf("generate: interrupted after %d tokens", len(res.TokenIDs))
				}
				return err
			}
			text := tok.Decode(trimEOG(res.TokenIDs, tok))
			if format == "json" {
				out := generateJSON{
					PromptTokenIDs: res.PromptIDs, TokenIDs: res.TokenIDs, Text: text,
					PrefillTPS: res.PrefillTokensPerSecond(), DecodeTPS: res.DecodeTokensPerSecond(),
					TTFTms: float64(res.TTFT.Microseconds()) / 1000,
				}
				enc := json.NewEncoder(env.Stdout)
				enc.SetEscapeHTML(false)
				return enc.Encode(out)
			}
			if len(text) > len(printed) {
				fmt.Fprint(env.Stdout, text[len(printed):])
			}
			fmt.Fprintln(env.Stdout)
			fmt.Fprintf(env.Stderr, "prompt %d tokens, prefill %.1f tok/s; generated %d tokens (%s), decode %.1f tok/s; ttft %.1f ms; %d threads\n",
				len(res.PromptIDs), res.PrefillTokensPerSecond(), len(res.TokenIDs), res.StopReason, res.DecodeTokensPerSecond(),
				float64(res.TTFT.Microseconds())/1000, m.Threads())
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&modelPath, "model", "", "path of the GGUF model file (required)")
	f.StringVar(&prompt, "prompt", "", "prompt text (required)")
	f.IntVar(&maxTokens, "max-tokens", 32, "generate at most N tokens")
	f.Float64Var(&temperature, "temperature", 0, "sampling temperature; 0 = greedy")
	f.IntVar(&topK, "top-k", 0, "sample only from the K most likely tokens (0 = all)")
	f.Float64Var(&topP, "top-p", 0, "sample only from the smallest set with probability mass P (0 = all)")
	f.Uint64Var(&seed, "seed", 0, "seed of the sampler (same seed, same output)")
	f.IntVar(&threads, "threads", runtime.NumCPU(), "threads for matrix products")
	f.StringVar(&format, "format", "text", "output format: text or json")
	return cmd
}

// trimEOG drops a final end-of-generation token so it does not appear as
// text.
func trimEOG(ids []int, tok *tokenizer.Tokenizer) []int {
	if n := len(ids); n > 0 && tok.IsEOG(ids[n-1]) {
		return ids[:n-1]
	}
	return ids
}

// openModel loads a model and its tokenizer for the runtime commands,
// turning bad input into one-line usage errors that name the fix.
func openModel(path string, threads int) (*model.Model, *tokenizer.Tokenizer, error) {
	if path == "" {
		return nil, nil, usagef("--model is required: give the path of a GGUF model file")
	}
	if threads < 1 {
		return nil, nil, usagef("--threads %d must be at least 1", threads)
	}
	st, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, usagef("model file %s does not exist: check the --model path", path)
	}
	if err != nil {
		return nil, nil, usagef("cannot read model file %s: %v", path, err)
	}
	if st.IsDir() {
		return nil, nil, usagef("model path %s is a directory: give the .gguf file", path)
	}
	m, err := model.Load(path, model.Options{Threads: threads})
	if err != nil {
		if errors.Is(err, model.ErrUnsupported) {
			return nil, nil, &UsageError{Err: err}
		}
		return nil, nil, err
	}
	tok, err := tokenizer.FromGGUF(m.File)
	if err != nil {
		m.Close()
		return nil, nil, usagef("model %s has no usable tokenizer (%v): use a GGUF with tokenizer.ggml.* metadata", path, err)
	}
	return m, tok, nil
}
