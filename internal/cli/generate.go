package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/lesfarm/lesfarm/profile"
	"github.com/lesfarm/lesfarm/runtime/expert"
	"github.com/lesfarm/lesfarm/runtime/generate"
	"github.com/lesfarm/lesfarm/runtime/les"
	"github.com/lesfarm/lesfarm/runtime/measure"
	"github.com/lesfarm/lesfarm/runtime/model"
	"github.com/lesfarm/lesfarm/runtime/sample"
	"github.com/lesfarm/lesfarm/runtime/spec"
	"github.com/lesfarm/lesfarm/runtime/tokenizer"
	"github.com/lesfarm/lesfarm/runtime/units"
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
	// LES fields, present only when experts stream through the store.
	*generateLESJSON
	// Speculative is present only with --draft.
	Speculative *generateSpecJSON `json:"speculative,omitempty"`
}

// generateSpecJSON is the "speculative" object of --format json with
// --draft: the draft's acceptance and where the decode time went.
type generateSpecJSON struct {
	Draft               string  `json:"draft"`
	K                   int     `json:"k"`
	Rounds              int     `json:"rounds"`
	Drafted             int     `json:"drafted"`
	Accepted            int     `json:"accepted"`
	AcceptanceRate      float64 `json:"acceptance_rate"`
	TokensPerTargetPass float64 `json:"tokens_per_target_pass"`
	AcceptedHistogram   []int   `json:"accepted_histogram"`
	DraftMS             float64 `json:"draft_ms"`
	TargetMS            float64 `json:"target_ms"`
}

func newGenerateSpecJSON(path string, s *spec.Stats) *generateSpecJSON {
	return &generateSpecJSON{
		Draft: path, K: s.K, Rounds: s.Rounds, Drafted: s.Drafted, Accepted: s.Accepted,
		AcceptanceRate: s.AcceptanceRate(), TokensPerTargetPass: s.TokensPerTargetPass(),
		AcceptedHistogram: s.Histogram,
		DraftMS:           float64(s.DraftTime.Microseconds()) / 1000,
		TargetMS:          float64(s.TargetTime.Microseconds()) / 1000,
	}
}

// generateLESJSON are the extra --format json keys of a streaming --mode
// (decode phase only, like the bench ladder's rows).
type generateLESJSON struct {
	Mode               string  `json:"mode"`
	Profile            string  `json:"profile"`
	TimeBase           string  `json:"time_base"` // device or host: the clock of decode_tps and stall_fraction
	BudgetBytes        int64   `json:"budget_bytes"`
	HitRate            float64 `json:"hit_rate"`
	PredictorPrecision float64 `json:"predictor_precision"`
	PredictorRecall    float64 `json:"predictor_recall"`
	StallFraction      float64 `json:"stall_fraction"`
	BytesReadPerToken  float64 `json:"bytes_read_per_token"`
}

func newGenerateCmd(env *Env) *cobra.Command {
	var (
		modelPath, prompt, format string
		draftPath                 string
		maxTokens, threads, topK  int
		draftK                    string
		temperature, topP         float64
		seed                      uint64
		lesf                      lesGenFlags
	)
	cmd := &cobra.Command{
		Use:   "generate --model PATH --prompt TEXT [--max-tokens N]",
		Short: "Generate text with the LES runtime from a GGUF model (experts in RAM or streamed by the LES store)",
		Long: `Generate runs a GGUF model (qwen3moe or qwen3) on a prompt: batched prefill,
then token-by-token decoding until an end-of-generation token or --max-tokens.

--temperature 0 (the default) is greedy decoding (argmax, ties to the lowest
id), which reproduces llama.cpp's greedy output. A positive temperature samples,
optionally restricted by --top-k and --top-p; --seed makes sampling repeatable.

With --format text the generated text streams to stdout and the timings go to
stderr. With --format json one object is printed:
  {"prompt_token_ids":[...],"token_ids":[...],"text":"...",
   "prefill_tokens_per_second":x,"decode_tokens_per_second":y,"ttft_ms":z}

Experts: --mode resident (the default) holds every expert in RAM. The other
modes stream experts from the model file through the LES expert store, with
at most --expert-budget bytes of experts resident; the output is identical:
  on-demand           read each missing expert synchronously, one at a time
  on-demand-parallel  read a layer's missing experts in parallel, then compute
  lookahead           + prefetch the experts the next layer's router predicts
  scheduled           + ready-first compute (resident first, then by arrival)
--expert-budget is bytes (512MiB) or a fraction of the expert bytes (0.2 or
20%). Storage: by default the file is read at its real speed through the page
cache; --profile NAME|FILE emulates a device (built-ins: ` + strings.Join(profile.Builtin(), ", ") + `),
--profile direct or --storage direct reads the real disk with O_DIRECT. A
packed model (lesfarm pack) is read with one read per expert. In a streaming
mode the JSON object also has "mode", "profile", "budget_bytes", "hit_rate",
"predictor_precision", "predictor_recall", "stall_fraction" and
"bytes_read_per_token" (decode phase).

Speculative decoding: --draft PATH names a small model with the same
vocabulary (e.g. a dense qwen3 draft of a qwen3moe target); --draft ngram
drafts without a model by prompt lookup (the continuation of the latest
earlier occurrence of the last 4, 3 or 2 tokens). Each round the drafter
proposes up to --draft-k tokens and the target verifies them in one batched
pass. Greedy, it keeps the longest prefix it agrees with plus its own next
token, so the output is token-for-token the plain greedy output; with
--temperature the standard rejection rule keeps the target's sampling
distribution. --draft-k auto chooses k (up to 8) each round from the
measured acceptance and verify cost and decodes plainly where drafting does
not pay. --draft mtp drafts with the model's own MTP/NextN block
(qwen35moe files carry one), with no draft file. The draft's experts are
always resident; the target may stream (--mode). The JSON object then has a "speculative" object: draft, k, rounds,
drafted, accepted, acceptance_rate, tokens_per_target_pass,
accepted_histogram (rounds by accepted drafts 0..k), draft_ms, target_ms.`,
		Example: `  lesfarm generate --model tiny.gguf --prompt "In the beginning" --max-tokens 32
  lesfarm generate --model tiny.gguf --prompt "Once upon a time" --temperature 0.8 --seed 7 --format json
  lesfarm generate --model phone.packed.gguf --prompt "Hello" --mode scheduled --expert-budget 20% --profile phone-flagship
  lesfarm generate --model tiny-moe.gguf --draft tiny-draft.gguf --draft-k 4 --prompt "In the beginning" --format json`,
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
			if draftPath == "" && cmd.Flags().Changed("draft-k") {
				return usagef("--draft-k applies to speculative decoding: add --draft PATH, or drop it")
			}
			draftN, adaptive := spec.DefaultK, false
			if draftPath != "" {
				if draftK == "auto" {
					draftN, adaptive = spec.AdaptiveMaxK, true
				} else if k, err := strconv.Atoi(draftK); err != nil || k < 1 || k > spec.MaxK {
					return usagef("--draft-k %q must be auto or in [1, %d]", draftK, spec.MaxK)
				} else {
					draftN = k
				}
			}
			ls, err := lesf.resolve(cmd.Flags())
			if err != nil {
				return err
			}
			ses, err := openSession(modelPath, threads, ls.config())
			if err != nil {
				return ls.loadError(err, modelPath)
			}
			defer ses.Close()
			tok := ses.Tok
			m := ses.Model
			var drafter spec.Drafter
			switch draftPath {
			case "":
			case "ngram":
				drafter = &spec.NGramDrafter{}
			case "mtp":
				if !m.HasMTP() {
					return usagef("--draft mtp: %s has no MTP/NextN block (nextn_predict_layers = 0); give --draft PATH of a draft model or --draft ngram", modelPath)
				}
			default:
				draft, _, err := openModel(draftPath, threads)
				if err != nil {
					return err
				}
				defer draft.Close()
				if draft.Arch != "qwen3" && draft.Arch != m.Arch {
					return usagef("--draft %s is a %s model; a draft for %s must be a dense qwen3 model or a %s model with its vocabulary", draftPath, draft.Arch, modelPath, m.Arch)
				}
				if drafter, err = spec.NewModelDrafter(m, draft); err != nil {
					return usagef("--draft %s cannot draft for %s: %v", draftPath, modelPath, err)
				}
			}
			ids := tok.Tokenize(prompt, true, false)
			if len(ids) == 0 {
				return usagef("--prompt tokenizes to no tokens: give a non-empty prompt")
			}
			if len(ids) > m.Context {
				return usagef("prompt is %d tokens but the model's context length is %d: shorten --prompt", len(ids), m.Context)
			}
			if syntheticModel(modelPath) { // said once the input is accepted, before the text
				fmt.Fprintf(env.Stderr, "note: %s has random weights (lesfarm synth): the text below is gibberish; its timings and expert traffic are real\n", modelPath)
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
			var specDec *les.Speculative
			if drafter != nil || draftPath == "mtp" {
				var dec *spec.Decoder
				var derr error
				if draftPath == "mtp" {
					dec, derr = spec.NewMTP(m)
				} else {
					dec, derr = spec.NewWithDrafter(m, drafter)
				}
				if derr != nil {
					return derr
				}
				specDec = &les.Speculative{Dec: dec, K: draftN, Adaptive: adaptive}
				ses.SetDecoder(specDec)
			}
			rp := les.RepParams{Prompts: [][]int{ids}, MaxTokens: maxTokens}
			rp.Sampling, rp.IsEOG, rp.OnToken = sp, tok.IsEOG, p.OnToken
			r, err := ses.Repetition(env.Ctx, rp)
			res := r.Last
			if err != nil {
				if res == nil {
					return err
				}
				if env.Ctx.Err() != nil {
					return fmt.Errorf("generate: interrupted after %d tokens", len(res.TokenIDs))
				}
				return err
			}
			// One repetition, measured like every other: les.Result.
			meas := ses.Measure([]les.Rep{r}, false, 0)
			text := tok.Decode(trimEOG(res.TokenIDs, tok))
			if format == "json" {
				out := generateJSON{
					PromptTokenIDs: res.PromptIDs, TokenIDs: res.TokenIDs, Text: text,
					PrefillTPS: meas.PrefillTPS.Mean, DecodeTPS: meas.DecodeTPS.Mean, TTFTms: meas.TTFTMS.Mean,
				}
				if ls != nil {
					out.generateLESJSON = ls.report(ses, &meas)
				}
				if specDec != nil {
					out.Speculative = newGenerateSpecJSON(draftPath, &specDec.Last)
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
				len(res.PromptIDs), meas.PrefillTPS.Mean, len(res.TokenIDs), res.StopReason, meas.DecodeTPS.Mean,
				meas.TTFTMS.Mean, m.Threads())
			if specDec != nil {
				s := &specDec.Last
				fmt.Fprintf(env.Stderr, "speculative: draft %s, k %d; %d rounds, accepted %d of %d drafts (%.3f), %.2f tokens per target pass; draft %.1f ms, target %.1f ms\n",
					draftPath, s.K, s.Rounds, s.Accepted, s.Drafted, s.AcceptanceRate(), s.TokensPerTargetPass(),
					float64(s.DraftTime.Microseconds())/1000, float64(s.TargetTime.Microseconds())/1000)
			}
			if ls != nil {
				r := ls.report(ses, &meas)
				fmt.Fprintf(env.Stderr, "experts: mode %s, storage %s, %s time, budget %d bytes; decode hit rate %.3f, predictor precision %.3f recall %.3f, stall fraction %.3f, %.0f bytes read per token\n",
					r.Mode, r.Profile, r.TimeBase, r.BudgetBytes, r.HitRate, r.PredictorPrecision, r.PredictorRecall, r.StallFraction, r.BytesReadPerToken)
			}
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
	f.StringVar(&draftPath, "draft", "", "speculative decoding: path of a GGUF draft model with the target's vocabulary, ngram (prompt lookup), or mtp (the model's own MTP block)")
	f.StringVar(&draftK, "draft-k", strconv.Itoa(spec.DefaultK), "speculative decoding: tokens the drafter proposes per round, or auto (adaptive)")
	lesf.addFlags(f)
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

// openModel loads a model (every expert resident) and its tokenizer for
// the runtime commands, turning bad input into one-line usage errors that
// name the fix.
func openModel(path string, threads int) (*model.Model, *tokenizer.Tokenizer, error) {
	ses, err := openSession(path, threads, measure.Config{Resident: true})
	if err != nil {
		return nil, nil, err
	}
	return ses.Model, ses.Tok, nil
}

// openSession is openModel for a measurement session of cfg (its Model and
// Threads are set from path and threads), opened by measure.Open.
func openSession(path string, threads int, cfg measure.Config) (*measure.Session, error) {
	if path == "" {
		return nil, usagef("--model is required: give the path of a GGUF model file")
	}
	if threads < 1 {
		return nil, usagef("--threads %d must be at least 1", threads)
	}
	st, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, usagef("model file %s does not exist: check the --model path", path)
	}
	if err != nil {
		return nil, usagef("cannot read model file %s: %v", path, err)
	}
	if st.IsDir() {
		return nil, usagef("model path %s is a directory: give the .gguf file", path)
	}
	cfg.Model, cfg.Threads = path, threads
	ses, err := measure.Open(cfg)
	switch {
	case errors.Is(err, measure.ErrNoTokenizer):
		return nil, usagef("model %s has %v: use a GGUF with tokenizer.ggml.* metadata", path, err)
	case errors.Is(err, model.ErrUnsupported):
		return nil, &UsageError{Err: err}
	}
	return ses, err
}

// lesGenFlags are generate's expert streaming flags. Values are parsed
// with the same helpers as bench --ladder (bench.ParseBudget,
// expert.ParseMode, profile.Load, expert.NewPolicy).
type lesGenFlags struct {
	mode, budget, profile, storage, policy, timeBase string
}

// lesModeNames lists the values --mode accepts.
const lesModeNames = "resident, on-demand, on-demand-parallel, lookahead or scheduled"

func (lf *lesGenFlags) addFlags(f *pflag.FlagSet) {
	f.StringVar(&lf.mode, "mode", "resident", "experts: resident (all in RAM), on-demand, on-demand-parallel, lookahead or scheduled (streamed by the LES store)")
	f.StringVar(&lf.budget, "expert-budget", "", "streaming modes: most expert bytes resident, as bytes (512MiB) or a fraction of the expert bytes (0.2, 20%)")
	f.StringVar(&lf.profile, "profile", "", "streaming modes: emulated storage "+strings.Join(profile.Builtin(), ", ")+", a YAML profile file, or direct (default: the file at its real speed)")
	f.StringVar(&lf.storage, "storage", "", "streaming modes: direct = the real disk with O_DIRECT, no emulation")
	f.StringVar(&lf.policy, "cache-policy", "lfu", "streaming modes: expert cache policy: "+strings.Join(expert.PolicyNames(), ", "))
	f.StringVar(&lf.timeBase, "time", "", "streaming modes: clock of the decode figures: device (the profile's compute: section) or host; default device when the profile declares its compute, as the farm measures")
}

// lesGen is a resolved streaming configuration.
type lesGen struct {
	cfg measure.Config
}

// config returns the session configuration: every expert resident for a
// nil g.
func (g *lesGen) config() measure.Config {
	if g == nil {
		return measure.Config{Resident: true}
	}
	return g.cfg
}

// resolve checks the flags and returns nil for --mode resident.
func (lf *lesGenFlags) resolve(fs *pflag.FlagSet) (*lesGen, error) {
	if strings.EqualFold(strings.TrimSpace(lf.mode), "resident") {
		for _, name := range []string{"expert-budget", "profile", "storage", "cache-policy", "time"} {
			if fs.Changed(name) {
				return nil, usagef("--%s applies to a streaming --mode (on-demand, on-demand-parallel, lookahead, scheduled): add e.g. --mode scheduled, or drop it", name)
			}
		}
		return nil, nil
	}
	mode, err := expert.ParseMode(strings.TrimSpace(lf.mode))
	if err != nil {
		return nil, usagef("--mode %q is not supported: use %s", lf.mode, lesModeNames)
	}
	if mode == expert.OracleMode {
		return nil, usagef("--mode oracle replays a recorded routing and is only a bench bound: use lesfarm bench --ladder, or --mode %s", lesModeNames)
	}
	g := &lesGen{cfg: measure.Config{Mode: mode, Policy: lf.policy}}
	direct, prof, err := resolveStorage(lf.profile, lf.storage)
	if err != nil {
		return nil, err
	}
	g.cfg.Direct, g.cfg.Profile = direct, prof
	if lf.budget == "" {
		return nil, usagef("--mode %s needs --expert-budget: bytes (e.g. 512MiB) or a fraction of the expert bytes (e.g. 0.2 or 20%%)", mode)
	}
	if g.cfg.Budget, err = units.ParseBudget(lf.budget); err != nil {
		return nil, usagef("--expert-budget: %v", err)
	}
	if _, err := expert.NewPolicy(lf.policy); err != nil {
		return nil, usagef("--cache-policy: %v", err)
	}
	if g.cfg.Time, err = measure.ParseTime(lf.timeBase); err != nil {
		return nil, usagef("--time: %v", err)
	}
	if _, err := g.cfg.DeviceTime(); err != nil {
		return nil, usagef("--time device: %v", err)
	}
	return g, nil
}

// loadError turns a budget too small for one expert, or a streaming mode
// on a dense model, into a usage error.
func (g *lesGen) loadError(err error, path string) error {
	switch {
	case g != nil && errors.Is(err, expert.ErrBudgetTooSmall):
		return usagef("--expert-budget: %v", err)
	case g != nil && errors.Is(err, les.ErrNotMoE):
		return usagef("--mode %s streams experts, but %s is a dense model: use --mode resident", g.cfg.Mode, path)
	}
	return err
}

// report is the LES part of the output: les.Result's decode-phase figures.
func (g *lesGen) report(ses *measure.Session, r *les.Result) *generateLESJSON {
	tb := measure.TimeHost
	if r.DeviceTime {
		tb = measure.TimeDevice
	}
	return &generateLESJSON{
		Mode: g.cfg.Mode.String(), Profile: ses.Storage, TimeBase: string(tb), BudgetBytes: ses.Budget,
		HitRate: r.HitRate, PredictorPrecision: r.PredictorPrecision, PredictorRecall: r.PredictorRecall,
		StallFraction: r.StallFraction, BytesReadPerToken: r.BytesPerToken,
	}
}
