package bench

import (
	"context"
	"fmt"
	"os"

	"github.com/lesfarm/lesfarm/runtime/expert"
	"github.com/lesfarm/lesfarm/runtime/gguf"
	"github.com/lesfarm/lesfarm/runtime/model"
	"github.com/lesfarm/lesfarm/runtime/perplexity"
	"github.com/lesfarm/lesfarm/runtime/quant"
)

// MixedMode is the mode name of the +mixed-precision row.
const MixedMode = "mixed-precision"

// MixedNote is the row's statement on identical_output.
const MixedNote = "identical_output does not apply: the mixed-precision model has other weights, so its tokens may differ from the reference; compare perplexity instead"

// MixedRow holds the extra fields of the +mixed-precision ladder row: the
// planner's model (lesfarm quantize --budget) run in the scheduled mode
// with the ladder's expert budget and storage.
type MixedRow struct {
	MixedModel string `json:"mixed_model"`
	// MixedModelBytes and ReferenceModelBytes are the file sizes.
	MixedModelBytes     int64 `json:"mixed_model_bytes"`
	ReferenceModelBytes int64 `json:"reference_model_bytes"`
	// PlanBudgetBytes is the file-size budget the planner was given
	// (les.quant.plan.budget; 0 if the model stores no plan).
	PlanBudgetBytes int64 `json:"plan_budget_bytes"`
	// ExpertBytes is the mixed model's total expert bytes (the budget is
	// the same number of bytes as for the reference's rows).
	ExpertBytes        int64   `json:"mixed_expert_bytes"`
	SpeedupVsScheduled float64 `json:"speedup_vs_scheduled"`
	// Perplexity and ReferencePerplexity are measured on the ladder's
	// perplexity text (0 when none was given) with PerplexityMethod.
	Perplexity          float64 `json:"perplexity"`
	ReferencePerplexity float64 `json:"reference_perplexity"`
	PerplexityMethod    string  `json:"perplexity_method"`
	// IdenticalOutputApplies is always false: see Note.
	IdenticalOutputApplies bool   `json:"identical_output_applies"`
	Note                   string `json:"note"`
}

// addMixedRow appends the +mixed-precision row measured in mr to rep.
func addMixedRow(ctx context.Context, cfg LadderConfig, rep *LadderReport, runs map[expert.Mode]*ladderRun, mr *ladderRun) error {
	row := mr.row(MixedMode)
	row.IdenticalOutput = false // does not apply: the mixed model is another model (MixedNote)
	row.MixedRow = &MixedRow{MixedModel: cfg.Mixed, Note: MixedNote, PerplexityMethod: "-"}
	x := row.MixedRow
	var prev *LadderRow
	if n := len(rep.Rows); n > 0 {
		prev = &rep.Rows[n-1]
	}
	base := func(m expert.Mode) float64 { return tpsOf(runs, m) }
	rep.relate(&row, prev, base)
	if b := base(expert.Scheduled); b > 0 {
		x.SpeedupVsScheduled = row.DecodeTokensPerSecond / b
	}
	if st, err := os.Stat(cfg.Mixed); err == nil {
		x.MixedModelBytes = st.Size()
	}
	if st, err := os.Stat(cfg.Model); err == nil {
		x.ReferenceModelBytes = st.Size()
	}
	if f, err := gguf.Open(cfg.Mixed); err == nil {
		if quant.HasPlan(f) {
			if p, err := quant.ReadPlan(f); err == nil {
				x.PlanBudgetBytes = p.Budget
			}
		}
		f.Close()
	}
	if len(cfg.PerplexityIDs) > 0 {
		var err error
		if x.ReferencePerplexity, x.PerplexityMethod, err = ladderPerplexity(ctx, cfg.Model, cfg.PerplexityIDs, cfg.Threads); err != nil {
			return fmt.Errorf("bench: reference perplexity: %w", err)
		}
		if x.Perplexity, _, err = ladderPerplexity(ctx, cfg.Mixed, cfg.PerplexityIDs, cfg.Threads); err != nil {
			return fmt.Errorf("bench: %s perplexity: %w", MixedMode, err)
		}
	}
	x.ExpertBytes = mr.expertBytes
	rep.Rows = append(rep.Rows, row)
	return nil
}

// ladderPerplexity is the perplexity of the model at path on ids, by
// ref.json's method (non-overlapping windows of min(context, 256) tokens,
// every position scored), with all weights resident.
func ladderPerplexity(ctx context.Context, path string, ids []int, threads int) (float64, string, error) {
	m, err := model.Load(path, model.Options{Threads: max(threads, 1)})
	if err != nil {
		return 0, "", err
	}
	defer m.Close()
	c := min(m.Context, 256)
	r, err := perplexity.Run(ctx, m, ids, perplexity.Config{Method: perplexity.MethodWindows, Context: c, BOS: -1})
	if err != nil {
		return 0, "", err
	}
	return r.PPL, fmt.Sprintf("windows, context %d, stride %d, positions 0..%d, %d tokens", c, c, c-1, r.TokensScored), nil
}
