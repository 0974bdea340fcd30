package cli

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/lesfarm/lesfarm/runtime/model"
	"github.com/lesfarm/lesfarm/runtime/tensor"
)

func init() { register("synth", newSynthCmd) }

func newSynthCmd(env *Env) *cobra.Command {
	var (
		c        model.SynthConfig
		typeName string
		out      string
		quiet    bool
		preset   string
		mtp      int
	)
	cmd := &cobra.Command{
		Use:   "synth -o PATH [geometry flags]",
		Short: "Write a random-weight GGUF model of any geometry (for benchmarks)",
		Long: `Synth writes a qwen3moe, dense qwen3 or qwen35moe GGUF model with random weights
and a byte-level BPE tokenizer, so generate and bench run on it. Weights are scaled
like the golden fixture (unit activations after every RMSNorm, router logits
of std ≈ 2), so activations stay finite and routing spreads over the experts.
The output is streamed block by block: a multi-GB model needs little RAM.
The same flags and --seed always write the same bytes.

Matrices use --type; a matrix whose rows do not fit the type's block size
falls back to Q8_0, then F16, as llama-quantize does. Norms and routers are F32.

A phone-shaped model (~3 GB):
  lesfarm synth --layers 24 --experts 128 --experts-used 8 --hidden 1024 \
    --expert-ffn 512 --heads 16 --kv-heads 4 --vocab 32000 --type Q4_K -o /tmp/phone.gguf

qwen35moe (Qwen3.5-MoE, the text backbone of MiniCPM-V 4.7 35B-A3B) has Gated
DeltaNet layers (--ssm-* flags) and gated full attention in every
--full-attn-interval'th layer, a shared expert (--shared-ffn) beside the routed
ones, and --mtp MTP/NextN blocks after the decoder layers. It writes every key
and tensor llama.cpp reads for the architecture (see docs/les.md). Presets:
  qwen35moe-35b-a3b         the published 35B-A3B shape (40 layers, 256 experts,
                            top-8, hidden 2048, expert FFN 512, vocab 248320; ~20 GB Q4_K)
  qwen35moe-35b-a3b-scaled  the same layers, 8 of them, vocab 32768 (~4.4 GB Q4_K)
Flags given with --preset override the preset's values.

--routing fine-grained-moe builds the weights so the model's own forward pass
routes like a trained fine-grained MoE (lookahead recall ~0.94, ~38% of a
token's experts reused by the next, 4-token verify ~2.5x one token's experts,
router rows of equal norm, layer 0's expert use balanced by router biases set
on a calibration text, and a tokenizer whose first merges are learnt from that
text; lesfarm routing-stats measures it). uniform (the default) is the worst case.
See docs/les.md, "Realistic routing".`,
		Example: `  lesfarm synth --layers 4 --experts 16 --experts-used 4 --hidden 256 --expert-ffn 128 --heads 4 --kv-heads 2 --vocab 4096 --type Q8_0 -o /tmp/small.gguf`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return usagef("-o PATH is required: where to write the model")
			}
			if preset != "" {
				p, ok := model.SynthPresets[preset]
				if !ok {
					return usagef("--preset %q is unknown (have %s)", preset, strings.Join(model.PresetNames(), ", "))
				}
				applyPreset(cmd, &c, p)
			}
			if cmd.Flags().Changed("mtp") || preset == "" {
				c.MTPLayers, c.NoMTP = mtp, mtp == 0
			}
			typ, err := tensor.ParseType(typeName)
			if err != nil {
				return usagef("--type %q is not supported: use Q4_K, Q8_0, F16 or F32", typeName)
			}
			c.Type = typ
			if err := c.Defaults(); err != nil {
				return usagef("%v", err)
			}
			total, err := model.SynthSize(c)
			if err != nil {
				return usagef("%v", err)
			}
			dir := filepath.Dir(out)
			tmp, err := os.CreateTemp(dir, ".synth-*.gguf")
			if err != nil {
				return usagef("cannot write in %s: %v", dir, err)
			}
			defer os.Remove(tmp.Name()) // no-op after the rename
			bar := newBytesBar(env, total, "synth "+filepath.Base(out), quiet)
			c.Progress = func(done, _ int64) { _ = bar.Set64(done) }
			ctx := env.Ctx
			bw := bufio.NewWriterSize(&ctxWriter{ctx: ctx, w: tmp}, 4<<20)
			err = model.WriteSynthetic(bw, c)
			if err == nil {
				err = bw.Flush()
			}
			if err == nil {
				err = tmp.Chmod(0o644) // CreateTemp makes 0600; a model is not secret
			}
			if err == nil {
				err = tmp.Close()
			} else {
				tmp.Close()
			}
			if err != nil {
				if ctx.Err() != nil {
					return fmt.Errorf("synth: interrupted; nothing written to %s", out)
				}
				return fmt.Errorf("synth: %w", err)
			}
			_ = bar.Finish()
			if err := os.Rename(tmp.Name(), out); err != nil {
				return fmt.Errorf("synth: %w", err)
			}
			st, _ := os.Stat(out)
			extra := ""
			if c.Arch == "qwen35moe" {
				extra = fmt.Sprintf(" (+%d MTP), full attention every %d, DeltaNet %d/%d heads of %d, shared FFN %d,", c.MTPLayers, c.FullAttnInterval, c.SSMGroups, c.SSMHeads, c.SSMState, c.SharedFFN)
			}
			if c.Routing == model.RoutingFineGrained {
				extra += " " + c.Routing + " routing,"
			}
			fmt.Fprintf(env.Stdout, "wrote %s: %s, %d layers%s %d experts (top-%d), hidden %d, expert FFN %d, %s, %.2f GB\n",
				out, c.Arch, c.Layers, extra, c.Experts, c.ExpertsUsed, c.Hidden, c.ExpertFFN, c.Type, float64(st.Size())/1e9)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&c.Arch, "arch", "qwen3moe", "architecture: qwen3moe, qwen35moe, or qwen3 (dense; --expert-ffn is then the FFN width)")
	f.StringVar(&preset, "preset", "", "start from a named geometry: "+strings.Join(model.PresetNames(), ", "))
	f.IntVar(&c.Layers, "layers", 4, "number of transformer blocks")
	f.IntVar(&c.Experts, "experts", 16, "experts per layer")
	f.IntVar(&c.ExpertsUsed, "experts-used", 4, "experts per token (top-k)")
	f.IntVar(&c.Hidden, "hidden", 256, "embedding width (multiple of 32; of 256 for K-quants)")
	f.IntVar(&c.ExpertFFN, "expert-ffn", 128, "per-expert FFN width")
	f.IntVar(&c.Heads, "heads", 4, "attention (query) heads")
	f.IntVar(&c.KVHeads, "kv-heads", 0, "key/value heads (GQA); default = --heads")
	f.IntVar(&c.HeadDim, "head-dim", 0, "head width; default hidden/heads")
	f.IntVar(&c.Vocab, "vocab", 4096, "vocabulary size (>= 300)")
	f.IntVar(&c.Context, "context", 4096, "context length written to the metadata")
	f.IntVar(&c.SharedFFN, "shared-ffn", 0, "qwen35moe: shared expert width; default --expert-ffn")
	f.IntVar(&c.FullAttnInterval, "full-attn-interval", 0, "qwen35moe: every Nth layer is full attention, the rest Gated DeltaNet; default 4")
	f.IntVar(&mtp, "mtp", 1, "qwen35moe: MTP/NextN blocks after the decoder layers (0 for none)")
	f.IntVar(&c.SSMGroups, "ssm-groups", 0, "qwen35moe: DeltaNet k-heads; default heads/2")
	f.IntVar(&c.SSMHeads, "ssm-heads", 0, "qwen35moe: DeltaNet v-heads (a multiple of --ssm-groups); default 2×groups")
	f.IntVar(&c.SSMState, "ssm-state", 0, "qwen35moe: DeltaNet head width (state is ssm-state²); default head-dim/2")
	f.IntVar(&c.ConvKernel, "conv-kernel", 0, "qwen35moe: DeltaNet causal conv width; default 4")
	f.IntVar(&c.RopeDim, "rope-dim", 0, "qwen35moe: rotary dims per full-attention head; default head-dim/4")
	f.StringVar(&c.Routing, "routing", model.RoutingUniform, "routing preset: "+strings.Join(model.RoutingPresets, ", ")+" (see docs/les.md, Realistic routing)")
	f.StringVar(&typeName, "type", "Q4_K", "weight type: Q4_K, Q8_0, F16 or F32")
	f.Uint64Var(&c.Seed, "seed", 1, "random seed")
	f.StringVarP(&out, "output", "o", "", "output path (required)")
	f.BoolVar(&quiet, "quiet", false, "no progress bar")
	return cmd
}

// applyPreset sets every geometry field of c from p except those whose flag
// was given on the command line.
func applyPreset(cmd *cobra.Command, c *model.SynthConfig, p model.SynthConfig) {
	set := func(flag string, dst *int, v int) {
		if !cmd.Flags().Changed(flag) {
			*dst = v
		}
	}
	if !cmd.Flags().Changed("arch") {
		c.Arch = p.Arch
	}
	set("layers", &c.Layers, p.Layers)
	set("experts", &c.Experts, p.Experts)
	set("experts-used", &c.ExpertsUsed, p.ExpertsUsed)
	set("hidden", &c.Hidden, p.Hidden)
	set("expert-ffn", &c.ExpertFFN, p.ExpertFFN)
	set("heads", &c.Heads, p.Heads)
	set("kv-heads", &c.KVHeads, p.KVHeads)
	set("head-dim", &c.HeadDim, p.HeadDim)
	set("vocab", &c.Vocab, p.Vocab)
	set("context", &c.Context, p.Context)
	set("shared-ffn", &c.SharedFFN, p.SharedFFN)
	set("full-attn-interval", &c.FullAttnInterval, p.FullAttnInterval)
	set("ssm-groups", &c.SSMGroups, p.SSMGroups)
	set("ssm-heads", &c.SSMHeads, p.SSMHeads)
	set("ssm-state", &c.SSMState, p.SSMState)
	set("conv-kernel", &c.ConvKernel, p.ConvKernel)
	set("rope-dim", &c.RopeDim, p.RopeDim)
	c.MTPLayers, c.NoMTP = p.MTPLayers, p.MTPLayers == 0
}

// ctxWriter fails writes once ctx is cancelled, so Ctrl-C stops a long
// synth promptly.
type ctxWriter struct {
	ctx interface{ Err() error }
	w   *os.File
}

func (c *ctxWriter) Write(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.w.Write(p)
}
