package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/lesfarm/lesfarm/runtime/pack"
)

func init() { register("pack", newPackCmd) }

func newPackCmd(env *Env) *cobra.Command {
	var (
		out   string
		quiet bool
	)
	cmd := &cobra.Command{
		Use:   "pack IN -o OUT",
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

The output is written to a temporary file and renamed when complete, so an
interrupted pack leaves nothing behind.`,
		Example: `  lesfarm pack /tmp/phone.gguf -o /tmp/phone.packed.gguf
  lesfarm bench --model /tmp/phone.gguf --experts /tmp/phone.packed.gguf --profile phone-flagship --expert-budget 0.2 --ladder`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("pack takes one input model: lesfarm pack IN -o OUT")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			in := args[0]
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
			var bar *progressbar.ProgressBar
			bar = progressbar.NewOptions64(st.Size(),
				progressbar.OptionSetWriter(env.Stderr),
				progressbar.OptionSetDescription("pack "+filepath.Base(out)),
				progressbar.OptionShowBytes(true),
				progressbar.OptionSetWidth(30),
				progressbar.OptionThrottle(200*time.Millisecond),
				progressbar.OptionSetVisibility(!quiet),
				progressbar.OptionOnCompletion(func() { fmt.Fprintln(env.Stderr) }),
			)
			err = pack.Pack(env.Ctx, in, out, pack.Options{Progress: func(done, total int64) {
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
			fmt.Fprintf(env.Stdout, "wrote %s: %.2f GB, one %d-aligned blob per expert\n", out, float64(ost.Size())/1e9, pack.Alignment)
			return nil
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", "", "output path of the packed model (required)")
	cmd.Flags().BoolVar(&quiet, "quiet", false, "no progress bar")
	return cmd
}
