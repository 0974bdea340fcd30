package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/lesfarm/lesfarm/runtime/gguf"
	"github.com/lesfarm/lesfarm/runtime/quant"
	"github.com/lesfarm/lesfarm/runtime/tensor"
	"github.com/lesfarm/lesfarm/runtime/tokenizer"
	"github.com/lesfarm/lesfarm/runtime/units"
)

func init() { register("quantize", newQuantizeCmd) }

func newQuantizeCmd(env *Env) *cobra.Command {
	var (
		out, typ, budget, calib, types, format string
		packOut, quiet, requant                bool
		threads, calibTokens                   int
	)
	cmd := &cobra.Command{
		Use:   "quantize IN -o OUT (--type T | --budget SIZE|FRACTION --calib FILE)",
		Short: "Quantize an F32/F16/BF16 GGUF model, uniformly or layer-wise under a byte budget",
		Long: `Quantize converts a GGUF model from F32, F16 or BF16 to Q8_0, Q6_K, Q5_K, Q4_K,
Q3_K or Q2_K with llama.cpp's reference quantizers (llama-quantize without an
importance matrix), streaming one tensor at a time so memory stays small. The
output is written to a temporary file and renamed when complete.

Which tensors change, as in llama-quantize: 2-D and larger weight matrices.
Norm vectors (1-D) and the MoE router (ffn_gate_inp) keep their input type.
A row that is not a multiple of a K-quant's 256-value block falls back as
llama-quantize does: Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0; Q3_K and
Q2_K -> Q4_0 (llama.cpp uses IQ4_NL, which this runtime lacks). The tensors
that fell back are listed.

--type T quantizes every such tensor to T. --pack writes the packed expert
layout of lesfarm pack (one page-aligned blob per expert) instead.

Layer-wise mixed precision: --budget SIZE|FRACTION --calib FILE plans a type
per (layer, part) (parts: each layer's routed experts, its shared expert
(qwen35moe), its other matrices "attention" (incl. Gated DeltaNet's), and
token_embd and output; architectures qwen3, qwen3moe, qwen35moe) under a file-size budget
(bytes such as 12MiB, or a fraction of the input file such as 0.3 or 30%).
The planner measures each part's sensitivity on the calibration text: the KL
divergence (nats/token) of the model's next-token distribution when only that
part is stored at a candidate type (--types, default all six), then solves the
multiple-choice knapsack exactly by dynamic programming: least total KL within
the budget. A part's tensors whose rows fit no block of the chosen type take
its fallback (shown in the table's type column, counted in its bytes). A
qwen35moe NextN (MTP) block never runs in the measured forward pass: its
parts take the largest KL of the decoder layers' same part as a proxy.
The plan goes into the output's metadata (les.quant.plan.*) and is
printed as a table (layer, part, type, bytes, sensitivity); --format json
prints it as JSON.

--allow-requantize accepts an already quantized input (as llama-quantize's
flag of that name): its weights are dequantized and quantized again, which
adds both quantizations' error. The planner then offers each quantized part
only the types that make it smaller, so a Q4_K model (e.g. from lesfarm
synth) can be planned below its size when no F16 source exists.`,
		Example: `  lesfarm quantize tiny-moe-kjv-f16.gguf -o tiny-q4.gguf --type Q4_K
  lesfarm quantize tiny-moe-kjv-f16.gguf -o tiny-q8.packed.gguf --type Q8_0 --pack
  lesfarm quantize tiny-moe-kjv-f16.gguf -o tiny-mixed.gguf --budget 0.3 --calib calib.txt`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("quantize takes one input model: lesfarm quantize IN -o OUT --type T")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			in := args[0]
			if out == "" {
				return usagef("-o OUT is required: where to write the quantized model")
			}
			if format != "text" && format != "json" {
				return usagef("--format %q is not supported: use text or json", format)
			}
			st, err := os.Stat(in)
			if errors.Is(err, fs.ErrNotExist) {
				return usagef("model %s does not exist: check the input path", in)
			}
			if err != nil {
				return fmt.Errorf("quantize: %w", err)
			}
			if d := filepath.Dir(out); d != "" {
				if dst, err := os.Stat(d); err != nil || !dst.IsDir() {
					return usagef("output directory %s does not exist: create it or choose another -o path", d)
				}
			}
			if quant.SamePath(in, out) {
				return usagef("-o %s is the input model: write the quantized model to another path", out)
			}
			if threads < 1 {
				return usagef("--threads %d must be at least 1", threads)
			}
			opts := quant.Options{Pack: packOut, Threads: threads, Requantize: requant}
			var plan *quant.Plan
			switch {
			case budget == "" && calib == "" && typ == "":
				return usagef("give --type T (one of %s), or --budget SIZE|FRACTION with --calib FILE", typeNames())
			case budget == "" && calib != "":
				return usagef("--calib needs --budget SIZE|FRACTION (the planner's file-size budget)")
			case budget != "" && typ != "":
				return usagef("--type and --budget exclude each other: --type quantizes uniformly, --budget plans per layer (use --types to restrict the planner's candidates)")
			case budget == "":
				t, err := quant.ParseType(typ)
				if err != nil {
					return usagef("--type %q is not supported: use one of %s", typ, typeNames())
				}
				opts.Type = t
			default:
				if plan, err = planBudget(env, in, st.Size(), budget, calib, types, threads, calibTokens, quiet, requant); err != nil {
					return err
				}
				opts.Type, opts.TypeFor, opts.Meta, opts.Label = tensor.Q8_0, plan.TypeFor(), plan.Meta(), "mixed"
			}
			bar := newBar(env, st.Size(), "quantize "+filepath.Base(out), quiet)
			opts.Progress = func(done, total int64) {
				bar.ChangeMax64(total)
				_ = bar.Set64(done)
			}
			res, err := quant.Quantize(env.Ctx, in, out, opts)
			if err != nil {
				switch {
				case env.Ctx.Err() != nil:
					return fmt.Errorf("quantize: interrupted; nothing written to %s", out)
				case errors.Is(err, quant.ErrQuantizedInput), errors.Is(err, quant.ErrRowLength), errors.Is(err, quant.ErrSamePath):
					return &UsageError{Err: err}
				case errors.Is(err, fs.ErrNotExist):
					return usagef("%v", err)
				}
				return err
			}
			_ = bar.Finish()
			if format == "json" {
				type jsonOut struct {
					Output string      `json:"output"`
					Size   int64       `json:"size_bytes"`
					Input  int64       `json:"input_bytes"`
					Type   string      `json:"type"`
					Packed bool        `json:"packed"`
					Plan   *quant.Plan `json:"plan,omitempty"`
				}
				label := opts.Type.String()
				if plan != nil {
					label = "mixed"
				}
				enc := json.NewEncoder(env.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(jsonOut{out, res.Size, st.Size(), label, packOut, plan})
			}
			if plan != nil {
				if err := plan.WriteTable(env.Stdout); err != nil {
					return err
				}
				fmt.Fprintln(env.Stdout)
			}
			what := opts.Type.String()
			if plan != nil {
				what = "a mixed-precision plan"
			}
			fmt.Fprintf(env.Stdout, "wrote %s: %d bytes (%.1f%% of the input's %d), %s", out, res.Size, 100*float64(res.Size)/float64(st.Size()), st.Size(), what)
			if packOut {
				fmt.Fprint(env.Stdout, ", packed")
			}
			fmt.Fprintln(env.Stdout)
			if fb := res.FellBack(); len(fb) > 0 && plan == nil {
				by := map[tensor.Type][]string{}
				var order []tensor.Type
				for _, t := range fb {
					if by[t.To] == nil {
						order = append(order, t.To)
					}
					by[t.To] = append(by[t.To], t.Name)
				}
				for _, to := range order {
					names := by[to]
					list := strings.Join(names[:min(3, len(names))], ", ")
					if len(names) > 3 {
						list += fmt.Sprintf(", … (%d more)", len(names)-3)
					}
					fmt.Fprintf(env.Stdout, "%d tensors fell back to %s (rows not a multiple of %s's %d-value block): %s\n", len(names), to, opts.Type, opts.Type.BlockSize(), list)
				}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVarP(&out, "output", "o", "", "output path (required)")
	f.StringVar(&typ, "type", "", "target type: "+typeNames())
	f.StringVar(&budget, "budget", "", "planner: file-size budget, bytes (12MiB) or a fraction of the input file (0.3, 30%)")
	f.StringVar(&calib, "calib", "", "planner: calibration text file")
	f.IntVar(&calibTokens, "calib-tokens", 1024, "planner: calibration tokens to score at most")
	f.StringVar(&types, "types", "", "planner: candidate types, comma-separated (default all: "+typeNames()+")")
	f.StringVar(&format, "format", "text", "output: text (plan table and summary) or json")
	f.BoolVar(&packOut, "pack", false, "write the packed expert layout (one page-aligned blob per expert, as lesfarm pack)")
	f.BoolVar(&quiet, "quiet", false, "no progress bar")
	f.BoolVar(&requant, "allow-requantize", false, "accept an already quantized input (dequantized and quantized again; the planner then offers only smaller types)")
	f.IntVar(&threads, "threads", runtime.NumCPU(), "threads")
	return cmd
}

func typeNames() string {
	names := make([]string, len(quant.Types))
	for i, t := range quant.Types {
		names[i] = t.String()
	}
	return strings.Join(names, ", ")
}

func newBar(env *Env, total int64, desc string, quiet bool) *progressbar.ProgressBar {
	return newBytesBar(env, total, desc, quiet)
}

// planBudget validates the planner's flags, measures sensitivity and
// returns the plan.
func planBudget(env *Env, in string, inSize int64, budget, calib, types string, threads, calibTokens int, quiet, requant bool) (*quant.Plan, error) {
	pb, err := units.ParseBudget(budget)
	if err != nil {
		return nil, usagef("--budget: %v", err)
	}
	b := pb.Resolve(inSize)
	if calib == "" {
		return nil, usagef("--budget needs --calib FILE: the calibration text the planner measures sensitivity on")
	}
	text, err := os.ReadFile(calib)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, usagef("calibration file %s does not exist: check the --calib path", calib)
	}
	if err != nil {
		return nil, usagef("cannot read --calib %s: %v", calib, err)
	}
	if len(strings.TrimSpace(string(text))) == 0 {
		return nil, usagef("calibration file %s is empty: give a text of at least a few hundred tokens", calib)
	}
	if calibTokens < 2 {
		return nil, usagef("--calib-tokens %d must be at least 2", calibTokens)
	}
	var cands []tensor.Type
	if types != "" {
		for _, s := range strings.Split(types, ",") {
			t, err := quant.ParseType(strings.TrimSpace(s))
			if err != nil {
				return nil, usagef("--types: %q is not supported: use %s", s, typeNames())
			}
			cands = append(cands, t)
		}
	}
	f, err := gguf.Open(in)
	if err != nil {
		return nil, usagef("%v", err)
	}
	minSize, maxSize, err := quant.Bounds(f, cands, requant)
	if err != nil {
		f.Close()
		if errors.Is(err, quant.ErrQuantizedInput) || errors.Is(err, quant.ErrRowLength) {
			return nil, &UsageError{Err: err}
		}
		return nil, err
	}
	if b < minSize {
		f.Close()
		return nil, usagef("--budget %s (%d bytes) is below the smallest possible model, %d bytes (every part at its smallest type): raise --budget to at least %d (the input is %d)", budget, b, minSize, minSize, inSize)
	}
	_ = maxSize
	tok, err := tokenizer.FromGGUF(f)
	f.Close()
	if err != nil {
		return nil, usagef("model %s has no usable tokenizer (%v): the planner tokenizes --calib with it", in, err)
	}
	ids := tok.Tokenize(string(text), true, false)
	var bar *progressbar.ProgressBar
	cfg := quant.MeasureConfig{Tokens: ids, MaxTokens: calibTokens, Types: cands, Threads: threads, Requantize: requant, Progress: func(done, total int) {
		if bar == nil {
			bar = progressbar.NewOptions(total, progressbar.OptionSetWriter(env.Stderr), progressbar.OptionSetDescription("sensitivity"),
				progressbar.OptionSetWidth(30), progressbar.OptionSetVisibility(!quiet), progressbar.OptionShowCount(),
				progressbar.OptionOnCompletion(func() { fmt.Fprintln(env.Stderr) }))
		}
		_ = bar.Set(done)
	}}
	sens, err := quant.Measure(env.Ctx, in, cfg)
	if err != nil {
		switch {
		case env.Ctx.Err() != nil:
			return nil, fmt.Errorf("quantize: interrupted")
		case errors.Is(err, quant.ErrNoCalibration), errors.Is(err, quant.ErrQuantizedInput), errors.Is(err, quant.ErrRowLength):
			return nil, &UsageError{Err: err}
		}
		return nil, err
	}
	plan, err := sens.Plan(b)
	if err != nil {
		if errors.Is(err, quant.ErrBudgetTooSmall) {
			return nil, &UsageError{Err: err}
		}
		return nil, err
	}
	return plan, nil
}
