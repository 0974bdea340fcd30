package routing

import (
	"context"
	"fmt"

	"github.com/lesfarm/lesfarm/runtime/model"
	"github.com/lesfarm/lesfarm/runtime/moe"
)

// recorder wraps a model's expert source: it asks the model for K
// lookahead predictions per token (the runtime's own predictor, one layer
// ahead) and records what was predicted and what was used in each layer
// of the current step.
type recorder struct {
	moe.Source
	k         int
	selected  [][]int
	predicted [][]int
}

// PredictK implements moe.Source: the model predicts k experts per token.
func (r *recorder) PredictK() int { return r.k }

// Prefetch implements moe.Source, recording the prediction.
func (r *recorder) Prefetch(layer int, experts []int) {
	if layer >= 0 && layer < len(r.predicted) {
		r.predicted[layer] = append(r.predicted[layer][:0], experts...)
	}
	r.Source.Prefetch(layer, experts)
}

// Use implements moe.Source, recording the demand.
func (r *recorder) Use(ctx context.Context, layer int, experts []int, fn func(int, moe.Weights) error) error {
	if layer >= 0 && layer < len(r.selected) {
		r.selected[layer] = append(r.selected[layer][:0], experts...)
	}
	return r.Source.Use(ctx, layer, experts, fn)
}

// Measure runs each token sequence through m one position at a time (so
// every step routes one token and the lookahead predicts for one token)
// and returns the recorded routing. The predictor predicts the model's
// top-k per layer. m's expert source is wrapped for the call and restored
// afterwards.
func Measure(ctx context.Context, m *model.Model, seqs [][]int) ([]Sequence, error) {
	if !m.IsMoE() {
		return nil, fmt.Errorf("routing: the model is not a Mixture-of-Experts model")
	}
	L := len(m.Layers)
	rec := &recorder{Source: m.Experts, k: m.ExpertsUsed, selected: make([][]int, L), predicted: make([][]int, L)}
	m.Experts = rec
	defer func() { m.Experts = rec.Source }()
	var out []Sequence
	for si, toks := range seqs {
		if len(toks) == 0 {
			continue
		}
		st, err := m.NewState(len(toks))
		if err != nil {
			return nil, fmt.Errorf("routing: sequence %d: %w", si, err)
		}
		seq := make(Sequence, 0, len(toks))
		for _, t := range toks {
			for l := range L {
				rec.selected[l], rec.predicted[l] = rec.selected[l][:0], rec.predicted[l][:0]
			}
			if _, err := st.Forward(ctx, []int{t}, false); err != nil {
				return nil, fmt.Errorf("routing: sequence %d: %w", si, err)
			}
			tok := Token{Selected: make([][]int, L), Predicted: make([][]int, L)}
			for l := range L {
				if len(rec.selected[l]) > 0 {
					tok.Selected[l] = append([]int(nil), rec.selected[l]...)
					tok.Predicted[l] = append([]int{}, rec.predicted[l]...)
				}
			}
			seq = append(seq, tok)
		}
		out = append(out, seq)
	}
	return out, nil
}
