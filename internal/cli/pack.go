package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/lesfarm/lesfarm/runtime/pack"
)

func init() { register("pack", newPackCmd) }

func newPackCmd(env *Env) *cobra.Command {
	var (
		out    string
		quiet  bool
		layout string
		gateUp string
		noPad  bool
		model  string
	)
	cmd := &cobra.Command{
		Use:   "pack {IN | --model IN} -o OUT",
		Short: "Rewrite a MoE GGUF so each expert is one page-aligned blob (one read per expert)",
		Long: `Pack rewrites a Mixture-of-Experts GGUF model for the LES expert store: the
gate, up and down weights of each (layer, expert) become adjacent in one
4096-byte-aligned blob, so streaming an expert from flash takes a single
pread (an unpacked model takes three).

The output is a valid GGUF v3 file (general.alignment 4096). Non-expert
tensors keep their names. Each stacked tensor blk.L.ffn_{gate,up,down}_exps.weight
becomes per-expert tensors blk.L.ffn_{gate,up,down}.E.weight, and les.pack.*
metadata keys give each layer's blob offset, stride and size (docs/les.md).
The tensor data is copied unchanged, so the model computes the same output.

--layout compat writes instead a file that llama.cpp, llama-bench and Ollama
load: llama.cpp's stacked expert tensors (for qwen35moe the merged
ffn_gate_up_exps plus ffn_down_exps; for qwen3moe separate gate, up and down,
which its llama.cpp loader requires), with general.alignment 4096 and every
expert's slice of each tensor starting on a page. The LES store then reads an
expert with two aligned preads (three for split gate/up). When the expert FFN
width does not make the slices whole pages, it is padded with zero rows and
columns (same output; expert_feed_forward_length gives the new width,
les.pack.expert_ffn the old); --no-pad keeps the width. --gate-up merged|split
overrides the per-architecture choice.

The output is written to a temporary file and renamed when complete, so an
interrupted pack leaves nothing behind.`,
		Example: `  lesfarm pack --model /tmp/phone.gguf -o /tmp/phone.packed.gguf
  lesfarm bench --model /tmp/phone.gguf --experts /tmp/phone.packed.gguf --profile phone-flagship --expert-budget 0.2 --ladder
  lesfarm pack /tmp/q35.gguf --layout compat -o /tmp/q35.compat.gguf    # llama.cpp loads it too`,
		Args: func(cmd *cobra.Command, args []string) error {
			if (len(args) == 1) == (model != "") {
				return usagef("pack takes one input model: lesfarm pack --model IN -o OUT (or pack IN -o OUT)")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			in := model
			if len(args) == 1 {
				in = args[0]
			}
			if out == "" {
				return usagef("-o OUT is required: where to write the packed model")
			}
			st, err := os.Stat(in)
			if err != nil {
				if errors.Is(err, os.ErrNotExist) {
					return usagef("model %s does not exist", in)
				}
				return fmt.Errorf("pack: %w", err)
			}
			bar := newBytesBar(env, st.Size(), "pack "+filepath.Base(out), quiet)
			if layout != pack.LayoutBlob && layout != pack.LayoutCompat {
				return usagef("--layout %q is unknown: use %s or %s", layout, pack.LayoutBlob, pack.LayoutCompat)
			}
			if gateUp != pack.GateUpAuto && gateUp != pack.GateUpMerged && gateUp != pack.GateUpSplit {
				return usagef("--gate-up %q is unknown: use %s, %s or %s", gateUp, pack.GateUpAuto, pack.GateUpMerged, pack.GateUpSplit)
			}
			err = pack.Pack(env.Ctx, in, out, pack.Options{Layout: layout, GateUp: gateUp, NoPad: noPad, Progress: func(done, total int64) {
				bar.ChangeMax64(total)
				_ = bar.Set64(done)
			}})
			if err != nil {
				if env.Ctx.Err() != nil {
					return fmt.Errorf("pack: interrupted; nothing written to %s", out)
				}
				return err
			}
			_ = bar.Finish()
			ost, _ := os.Stat(out)
			if layout == pack.LayoutBlob {
				fmt.Fprintf(env.Stdout, "wrote %s: %.2f GB, one %d-aligned blob per expert\n", out, float64(ost.Size())/1e9, pack.Alignment)
				return nil
			}
			fmt.Fprintf(env.Stdout, "wrote %s: %.2f GB, compat layout: %s\n", out, float64(ost.Size())/1e9, pack.DescribeCompat(out))
			return nil
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", "", "output path of the packed model (required)")
	cmd.Flags().StringVar(&model, "model", "", "input GGUF model, as bench and generate take it (or give it as the argument)")
	cmd.Flags().BoolVar(&quiet, "quiet", false, "no progress bar")
	cmd.Flags().StringVar(&layout, "layout", pack.LayoutBlob, "blob (one read per expert; lesfarm only) or compat (llama.cpp-loadable, page-aligned expert slices)")
	cmd.Flags().StringVar(&gateUp, "gate-up", pack.GateUpAuto, "compat layout: auto (merged where llama.cpp accepts it, e.g. qwen35moe), merged or split")
	cmd.Flags().BoolVar(&noPad, "no-pad", false, "compat layout: never pad the expert FFN width to page-aligned slices")
	return cmd
}
