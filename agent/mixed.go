package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/lesfarm/lesfarm/jobs"
	"github.com/lesfarm/lesfarm/runtime/expert"
	"github.com/lesfarm/lesfarm/runtime/gguf"
	"github.com/lesfarm/lesfarm/runtime/quant"
	"github.com/lesfarm/lesfarm/runtime/tensor"
	"github.com/lesfarm/lesfarm/runtime/tokenizer"
)

// runtimeMode maps a job mode to the expert store's mode: mixed-precision
// runs the scheduled mode on the derived model, speculative on the
// scheduled store.
func runtimeMode(m jobs.Mode) (expert.Mode, error) {
	if m == jobs.ModeMixedPrecision || m == jobs.ModeSpeculative {
		return expert.Scheduled, nil
	}
	return expert.ParseMode(string(m))
}

// mixed returns the path of the job model's layer-wise mixed-precision
// form and the expert bytes of the original model (the config's budget is
// resolved against those, so the mixed-precision rung gets the same cache
// bytes as the others). The planner (runtime/quant) measures sensitivity on
// jobs.CalibrationText and quantizes under the spec's budget; the result is
// packed when the job asks for the packed layout, and cached in
// WorkDir/mixed by model digest and budget.
func (r *Runner) mixed(ctx context.Context, job *Job) (string, int64, error) {
	f, err := gguf.Open(job.ModelPath)
	if err != nil {
		return "", 0, err
	}
	var refExperts int64
	for _, t := range f.Tensors() {
		if strings.Contains(t.Name, "_exps.") {
			refExperts += t.Size
		}
	}
	tok, err := tokenizer.FromGGUF(f)
	st := f.Size
	f.Close()
	if err != nil {
		return "", 0, fmt.Errorf("mixed-precision: no usable tokenizer: %w", err)
	}
	if r.WorkDir == "" {
		return "", 0, errors.New("mixed-precision needs a work dir to write the planned model into")
	}
	mp := job.Spec.MixedPrecision.Resolved()
	budget := mp.Budget.Bytes
	if mp.Budget.Fraction != 0 {
		budget = int64(mp.Budget.Fraction * float64(st))
	}
	packed := job.Spec.Model.Layout == jobs.LayoutPacked
	dir := filepath.Join(r.WorkDir, "mixed")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", 0, err
	}
	name := fmt.Sprintf("%s-%d-%d", job.Spec.Model.SHA256, budget, mp.CalibTokens)
	if packed {
		name += ".packed"
	}
	out := filepath.Join(dir, name+".gguf")
	if _, err := os.Stat(out); err == nil {
		return out, refExperts, nil
	}
	log := cmp.Or(r.Logger, slog.Default())
	log.InfoContext(ctx, "agent: planning mixed-precision model", "sha256", job.Spec.Model.SHA256, "budget_bytes", budget, "out", out)
	sens, err := quant.Measure(ctx, job.ModelPath, quant.MeasureConfig{
		Tokens: tok.Tokenize(jobs.CalibrationText(), true, false), MaxTokens: mp.CalibTokens, Threads: max(r.Threads, 1),
	})
	if err != nil {
		return "", 0, fmt.Errorf("mixed-precision: %w", err)
	}
	plan, err := sens.Plan(budget)
	if err != nil {
		return "", 0, fmt.Errorf("mixed-precision: %w", err)
	}
	if _, err := quant.Quantize(ctx, job.ModelPath, out, quant.Options{
		Type: tensor.Q8_0, TypeFor: plan.TypeFor(), Meta: plan.Meta(), Label: "mixed", Pack: packed, Threads: max(r.Threads, 1),
	}); err != nil {
		return "", 0, fmt.Errorf("mixed-precision: %w", err)
	}
	log.InfoContext(ctx, "agent: mixed-precision model ready", "out", out, "planned_bytes", plan.Size, "total_kl", plan.Error)
	return out, refExperts, nil
}
