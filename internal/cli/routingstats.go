package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/lesfarm/lesfarm/runtime/expert"
	"github.com/lesfarm/lesfarm/runtime/model"
	"github.com/lesfarm/lesfarm/runtime/routing"
	"github.com/lesfarm/lesfarm/runtime/tokenizer"
)

func init() { register("routing-stats", newRoutingStatsCmd) }

// routingPrompts are routing-stats' prompts when --prompts is not given:
// plain English of several registers, one sequence each.
var routingPrompts = []string{
	"The committee met on Tuesday to review the budget for the coming year, and after a long discussion it agreed to postpone the vote until the auditors had finished their report on the new library and the roads.",
	"In the beginning God created the heaven and the earth. And the earth was without form, and void; and darkness was upon the face of the deep. And the Spirit of God moved upon the face of the waters.",
	"To install the package, download the archive, unpack it into a directory of your choice, and run the setup script with the path of your configuration file as its only argument; then restart the service.",
	"She walked down to the harbour in the early morning, when the fishing boats were coming in and the gulls were crying over the nets, and bought bread, cheese and a bag of oranges for the journey north.",
}

func newRoutingStatsCmd(env *Env) *cobra.Command {
	var (
		modelPath, prompts, tracePath, format string
		maxTokens, threads                    int
		converge                              []int
	)
	cmd := &cobra.Command{
		Use:   "routing-stats (--model M [--prompts FILE] | --trace T)",
		Short: "Measure how a MoE model routes: popularity, reuse, lookahead precision/recall, verify-batch experts",
		Long: `Routing-stats measures, per MoE layer and over all layers (the mean of the layers):
  entropy     expert popularity entropy / log(experts) (1 = even use); eff = exp(entropy)
  top10%      share of demands taken by the most used 10% of experts (0.1 = even
              on an unbounded text; a short one reads more, see held-out and even)
  held-out    top10% ranked on one half of the tokens and read on the other
              (alternating blocks of 64 tokens): chance does not carry over, so
              even routing reads ~0.1 at any length
  even        top10% that routing with no preferred expert reads on the same
              tokens: the demands relabelled by a random permutation of the
              experts per block of 64 tokens (locality kept), mean of 16
  reuse       share of a token's experts the previous token used
  reuse@8     share of a token's experts used by any of the previous 8 tokens
  prec/recall the lookahead predictor's precision and recall: layer l+1's router
              applied to layer l's post-attention state (the embedding for layer 0),
              top-k experts, exactly as the runtime prefetches
  verify×4    unique experts of 4 consecutive tokens (a 4-token verify batch) as a
              multiple of one token's
With --model, each prompt (one per line of --prompts, or built-in English text)
runs through the model one token at a time with its own predictor. With --trace,
the decode steps of a recorded or imported trace are measured instead (multi-token
steps such as prefill are skipped; precision and recall need a trace recorded in
a lookahead mode). --converge N1,N2,... adds top10%, held-out, even and entropy
on the first N1, N2, ... tokens (and all), to see how popularity settles with
the text's length. The metrics are defined once, in runtime/routing.`,
		Example: `  lesfarm routing-stats --model ../shared/testdata/trained/tiny-moe-kjv-f16.gguf --prompts ../shared/testdata/trained/validation.txt
  lesfarm routing-stats --trace phone.trace.gz --format json
  lesfarm routing-stats --model fg.gguf --prompts long.txt --max-tokens 1024 --converge 584,1234,5000`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if format != "text" && format != "json" {
				return usagef("--format %q is not supported: use text or json", format)
			}
			if (modelPath == "") == (tracePath == "") {
				return usagef("give exactly one of --model M or --trace T")
			}
			if maxTokens < 2 {
				return usagef("--max-tokens %d: need at least 2 tokens per prompt", maxTokens)
			}
			var st *routing.Stats
			var seqs []routing.Sequence
			var src string
			var err error
			if tracePath != "" {
				st, seqs, err = traceRoutingStats(tracePath)
				src = "trace " + tracePath
			} else {
				st, seqs, err = modelRoutingStats(env, modelPath, prompts, maxTokens, threads)
				src = "model " + modelPath
			}
			if err != nil {
				return err
			}
			if len(converge) > 0 {
				if st.Convergence, err = routing.Converge(seqs, len(st.Layers), st.Experts, converge); err != nil {
					return err
				}
			}
			if format == "json" {
				enc := json.NewEncoder(env.Stdout)
				enc.SetIndent("", " ")
				return enc.Encode(st)
			}
			return printRoutingStats(env, src, st)
		},
	}
	f := cmd.Flags()
	f.StringVar(&modelPath, "model", "", "MoE model (GGUF) to run")
	f.StringVar(&prompts, "prompts", "", "text file, one prompt per non-empty line (default: built-in English prompts)")
	f.StringVar(&tracePath, "trace", "", "routing trace (bench --ladder --record-trace, or lesfarm trace import) instead of a model")
	f.IntVar(&maxTokens, "max-tokens", 256, "tokens of each prompt to run (longer prompts are cut)")
	f.IntVar(&threads, "threads", 2, "threads for matrix products")
	f.StringVar(&format, "format", "text", "output: text or json")
	f.IntSliceVar(&converge, "converge", nil, "also report popularity on the first N1,N2,... tokens")
	return cmd
}

// traceRoutingStats measures the trace at path; it also returns the
// trace's routing.
func traceRoutingStats(path string) (*routing.Stats, []routing.Sequence, error) {
	tf, err := expert.ReadTraceFile(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil, usagef("trace %s does not exist", path)
		}
		return nil, nil, usagef("%v", err)
	}
	seqs := routing.FromTrace(tf)
	experts := 0
	for _, l := range tf.Model.Layers {
		experts = max(experts, l.Experts)
	}
	st, err := routing.Compute(seqs, len(tf.Model.Layers), experts)
	if err != nil {
		return nil, nil, usagef("trace %s: %v (it needs one-token decode steps)", path, err)
	}
	return st, seqs, nil
}

// modelRoutingStats runs the prompts through the model at path; it also
// returns the recorded routing.
func modelRoutingStats(env *Env, path, promptFile string, maxTokens, threads int) (*routing.Stats, []routing.Sequence, error) {
	texts := routingPrompts
	if promptFile != "" {
		b, err := os.ReadFile(promptFile)
		if err != nil {
			return nil, nil, usagef("--prompts: %v", err)
		}
		texts = nil
		for _, line := range strings.Split(string(b), "\n") {
			if strings.TrimSpace(line) != "" {
				texts = append(texts, line)
			}
		}
		if len(texts) == 0 {
			return nil, nil, usagef("--prompts %s has no non-empty line", promptFile)
		}
	}
	if _, err := os.Stat(path); err != nil {
		return nil, nil, usagef("--model %s: %v", path, err)
	}
	m, err := model.Load(path, model.Options{Threads: threads})
	if err != nil {
		return nil, nil, usagef("--model %s: %v", path, err)
	}
	defer m.Close()
	if !m.IsMoE() {
		return nil, nil, usagef("--model %s is not a Mixture-of-Experts model", path)
	}
	tok, err := tokenizer.FromGGUF(m.File)
	if err != nil {
		return nil, nil, usagef("--model %s has no usable tokenizer: %v", path, err)
	}
	var seqs [][]int
	for _, t := range texts {
		ids := tok.Tokenize(t, true, false)
		ids = ids[:min(len(ids), maxTokens, m.Context)]
		if len(ids) >= 2 {
			seqs = append(seqs, ids)
		}
	}
	if len(seqs) == 0 {
		return nil, nil, usagef("no prompt has 2 tokens or more")
	}
	rs, err := routing.Measure(env.Ctx, m, seqs)
	if err != nil {
		return nil, nil, err
	}
	st, err := routing.Compute(rs, len(m.Layers), m.ExpertCount)
	return st, rs, err
}

// printRoutingStats writes the text report.
func printRoutingStats(env *Env, src string, st *routing.Stats) error {
	demands := float64(st.Tokens*st.TopK) / float64(st.Experts)
	fmt.Fprintf(env.Stdout, "routing of %s: %d tokens in %d sequences, %d experts, top-%d (%.0f demands per expert)\n", src, st.Tokens, st.Sequence, st.Experts, st.TopK, demands)
	tw := tabwriter.NewWriter(env.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "layer\tentropy\teff\ttop10%\theld-out\teven\treuse\treuse@8\tprec\trecall\tverify×4\t")
	row := func(name string, m routing.Metrics) {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", name, f3(m.Entropy), f1(m.EffectiveExperts), f3(m.Top10Share), f3(m.Top10HeldOut), f3(m.Top10Even),
			f3(m.Reuse), f3(m.ReuseWindow), f3(m.Precision), f3(m.Recall), f2(m.VerifyMultiple))
	}
	for l, m := range st.Layers {
		if m.Tokens > 0 {
			row(fmt.Sprint(l), m)
		}
	}
	row("all", st.Overall)
	if err := tw.Flush(); err != nil {
		return err
	}
	o := st.Overall
	fmt.Fprintf(env.Stdout, "top10%% %s on %.0f demands per expert; routing with no preferred expert reads %s here (even), ranked on half the tokens and read on the other %s (held-out)\n",
		f3(o.Top10Share), demands, f3(o.Top10Even), f3(o.Top10HeldOut))
	if len(st.Convergence) == 0 {
		return nil
	}
	fmt.Fprintln(env.Stdout, "popularity on the first N tokens:")
	tw = tabwriter.NewWriter(env.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "tokens\tdemands/expert\ttop10%\theld-out\teven\tentropy\t")
	for _, p := range st.Convergence {
		fmt.Fprintf(tw, "%d\t%.0f\t%s\t%s\t%s\t%s\t\n", p.Tokens, p.Demands, f3(p.Top10Share), f3(p.Top10HeldOut), f3(p.Top10Even), f3(p.Entropy))
	}
	return tw.Flush()
}

func fnum(x float64, prec int) string {
	if x != x {
		return "—"
	}
	return fmt.Sprintf("%.*f", prec, x)
}

func f1(x float64) string { return fnum(x, 1) }
func f2(x float64) string { return fnum(x, 2) }
func f3(x float64) string { return fnum(x, 3) }
