package model

import (
	"fmt"

	"github.com/lesfarm/lesfarm/runtime/moe"
	"github.com/lesfarm/lesfarm/runtime/pack"
	"github.com/lesfarm/lesfarm/runtime/tensor"
)

// An unpacked file (or a compat-layout packed one, pack.LayoutCompat)
// stores a layer's routed experts as stacked 3-D tensors: either
// blk.L.ffn_{gate,up,down}_exps.weight, or the merged
// blk.L.ffn_gate_up_exps.weight (dims [hidden, 2×ffn, experts], each
// expert's gate rows then its up rows, as llama.cpp accepts for qwen35moe)
// plus blk.L.ffn_down_exps.weight. The helpers below bind either form, so
// every architecture's builder handles both with one call.

// stackedExpertTypes checks layer's stacked expert tensors against the
// geometry and returns the gate, up and down types without reading data.
func (b *binder) stackedExpertTypes(layer, hidden, ffn, experts int) [3]tensor.Type {
	down := pack.StackedName(layer, 2)
	if _, ok := b.f.Tensor(pack.MergedName(layer)); ok {
		for _, sep := range []string{pack.StackedName(layer, 0), pack.StackedName(layer, 1)} {
			if _, dup := b.f.Tensor(sep); dup {
				b.fail("layer %d has both %s and %s; a layer stores gate and up merged or separate, not both", layer, pack.MergedName(layer), sep)
				return [3]tensor.Type{}
			}
		}
		gu := b.expertType(pack.MergedName(layer), hidden, 2*ffn, experts)
		return [3]tensor.Type{gu, gu, b.expertType(down, ffn, hidden, experts)}
	}
	return [3]tensor.Type{
		b.expertType(pack.StackedName(layer, 0), hidden, ffn, experts),
		b.expertType(pack.StackedName(layer, 1), hidden, ffn, experts),
		b.expertType(down, ffn, hidden, experts),
	}
}

// stackedResident reads layer's stacked (or merged gate+up) expert
// tensors into RAM, one moe.Weights per expert sharing the slabs.
func (b *binder) stackedResident(layer, experts int) ([]moe.Weights, error) {
	down, err := b.slabs(pack.StackedName(layer, 2), experts)
	if err != nil {
		return nil, err
	}
	out := make([]moe.Weights, experts)
	if _, ok := b.f.Tensor(pack.MergedName(layer)); ok {
		gu, err := b.slabs(pack.MergedName(layer), experts)
		if err != nil {
			return nil, err
		}
		for e := range experts {
			if len(gu[e])%2 != 0 {
				return nil, fmt.Errorf("tensor %s: an expert's %d bytes do not split into gate and up halves", pack.MergedName(layer), len(gu[e]))
			}
			h := len(gu[e]) / 2
			out[e] = moe.Weights{Gate: gu[e][:h:h], Up: gu[e][h:], Down: down[e]}
		}
		return out, nil
	}
	gate, err := b.slabs(pack.StackedName(layer, 0), experts)
	if err != nil {
		return nil, err
	}
	up, err := b.slabs(pack.StackedName(layer, 1), experts)
	if err != nil {
		return nil, err
	}
	for e := range experts {
		out[e] = moe.Weights{Gate: gate[e], Up: up[e], Down: down[e]}
	}
	return out, nil
}
