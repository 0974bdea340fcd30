package cli

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/lesfarm/lesfarm/runtime/expert"
	"github.com/lesfarm/lesfarm/runtime/routing"
)

func init() { register("trace", newTraceCmd) }

func newTraceCmd(env *Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "trace import",
		Short: "Work with routing traces (import real routing from vLLM or Megatron)",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return usagef("trace needs a subcommand: import") },
	}
	cmd.AddCommand(newTraceImportCmd(env))
	return cmd
}

func newTraceImportCmd(env *Env) *cobra.Command {
	var modelPath, out, from string
	var experts int
	cmd := &cobra.Command{
		Use:   "import FILE -o OUT [--model M]",
		Short: "Convert vLLM routed_experts (.npy) or Megatron router traces (.jsonl) to a lesfarm trace",
		Long: `Import reads real routing and writes lesfarm's trace format, which replay and
routing-stats --trace read:
  vllm      vLLM's routed_experts array, a .npy of int16 with shape
            [tokens, MoE layers, top_k]
  megatron  Megatron router-trace JSONL: one {"step": S, "layer": L,
            "top_indices": [[e, ...] per token]} object per line; every step
            must hold every layer with the same tokens
--from picks the format (default: by extension, .npy or .jsonl). With --model,
the layers, experts and top-k must match the model's MoE layers and the trace
carries its expert sizes; without it, every expert counts one byte and the
expert count is --experts (default: the largest id + 1). Each token becomes one
decode step.`,
		Example: `  lesfarm trace import routed_experts.npy --model qwen3-30b.gguf -o real.trace.gz
  lesfarm routing-stats --trace real.trace.gz`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			in := args[0]
			if out == "" {
				return usagef("-o OUT is required: where to write the trace")
			}
			if from == "" {
				switch strings.ToLower(filepath.Ext(in)) {
				case ".npy":
					from = "vllm"
				case ".jsonl", ".json":
					from = "megatron"
				default:
					return usagef("%s: cannot tell the format from the extension; give --from vllm or --from megatron", in)
				}
			}
			if from != "vllm" && from != "megatron" {
				return usagef("--from %q is unknown: use vllm or megatron", from)
			}
			r, err := readRouting(in, from)
			if err != nil {
				return err
			}
			var tm expert.TraceModel
			if modelPath != "" {
				if tm, err = modelTraceInfo(modelPath); err != nil {
					return err
				}
			} else {
				tm = routing.GuessModel(r, experts)
			}
			tf, err := routing.ToTrace(r, tm)
			if err != nil {
				if modelPath != "" {
					return usagef("%s: %v (--model %s)", in, err, modelPath)
				}
				return usagef("%s: %v", in, err)
			}
			if err := tf.WriteFile(out); err != nil {
				return err
			}
			fmt.Fprintf(env.Stdout, "wrote %s: %d tokens × %d MoE layers, top-%d, %s\n", out, len(r.Experts), r.Layers, r.TopK, tm)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVarP(&out, "output", "o", "", "output trace path (required)")
	f.StringVar(&modelPath, "model", "", "model whose geometry the routing must match")
	f.StringVar(&from, "from", "", "input format: vllm (.npy) or megatron (.jsonl); default by extension")
	f.IntVar(&experts, "experts", 0, "experts per layer without --model (default: largest id + 1)")
	return cmd
}

// readRouting parses the file at path in format from; errors name the
// file and the position.
func readRouting(path, from string) (*routing.Routed, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, usagef("%v", err)
	}
	defer fh.Close()
	var r *routing.Routed
	if from == "vllm" {
		var b []byte
		if b, err = io.ReadAll(io.LimitReader(fh, 1<<30)); err == nil {
			r, err = routing.ParseNPY(b)
		}
	} else {
		r, err = routing.ParseMegatron(fh)
	}
	if err != nil {
		return nil, usagef("%s: %v", path, err)
	}
	return r, nil
}
