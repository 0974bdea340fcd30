package quant

import (
	"fmt"

	"github.com/lesfarm/lesfarm/runtime/gguf"
	"github.com/lesfarm/lesfarm/runtime/tensor"
)

// MethodKnapsack names the planner's optimisation in plans and tables.
const MethodKnapsack = "multiple-choice knapsack DP (exact over 2^15 budget units): least total KL under the byte budget"

// MinSize returns the smallest model the parts of s allow: every part at
// its smallest candidate, plus the fixed bytes.
func (s *Sensitivity) MinSize() int64 {
	n := s.Fixed
	for _, p := range s.Parts {
		m := p.Candidates[0].Bytes
		for _, c := range p.Candidates {
			m = min(m, c.Bytes)
		}
		n += m
	}
	return n
}

// MaxSize returns the size with every part in its input type.
func (s *Sensitivity) MaxSize() int64 {
	n := s.Fixed
	for _, p := range s.Parts {
		n += p.Candidates[0].Bytes
	}
	return n
}

// Plan picks a type per (layer, part) so that the file fits budget bytes
// with the least total sensitivity (sum of the per-part KL divergences,
// which treats the parts' errors as additive, a first-order assumption).
// It returns an error wrapping ErrBudgetTooSmall, naming the smallest
// possible size, when nothing fits.
func (s *Sensitivity) Plan(budget int64) (*Plan, error) {
	if min := s.MinSize(); budget < min {
		return nil, fmt.Errorf("quant: %w: budget %d bytes is below the smallest possible model, %d bytes (every part at its smallest type); raise --budget to at least %d", ErrBudgetTooSmall, budget, min, min)
	}
	items := make([][]Option, len(s.Parts))
	for i, p := range s.Parts {
		for _, c := range p.Candidates {
			items[i] = append(items[i], Option{Bytes: c.Bytes, Err: c.KL})
		}
	}
	pick, err := SolveKnapsack(items, budget-s.Fixed)
	if err != nil {
		return nil, err
	}
	pl := &Plan{Budget: budget, Size: s.Fixed, Method: MethodKnapsack}
	for i, p := range s.Parts {
		c := p.Candidates[pick[i]]
		pl.Items = append(pl.Items, Choice{Layer: p.Layer, Part: p.Part, Type: c.Type, TypeName: c.Type.String(), Stored: c.Stored, Bytes: c.Bytes, Sensitivity: c.KL, Note: p.Note})
		pl.Size += c.Bytes
		pl.Error += c.KL
	}
	return pl, nil
}

// Bounds returns the smallest and largest file a plan over f's parts can
// give with the candidate types (default Types), without measuring;
// requant lets quantized parts take smaller types (Options.Requantize).
func Bounds(f *gguf.File, types []tensor.Type, requant bool) (minSize, maxSize int64, err error) {
	if len(types) == 0 {
		types = Types
	}
	parts, fixed, err := groupParts(f, types, requant)
	if err != nil {
		return 0, 0, err
	}
	s := &Sensitivity{Parts: parts, Fixed: fixed}
	return s.MinSize(), s.MaxSize(), nil
}
