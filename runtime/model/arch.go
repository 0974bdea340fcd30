package model

import (
	"context"

	"github.com/lesfarm/lesfarm/runtime/tensor"
)

// architecture is one model architecture, a peer of the others: it owns
// the forward pass over the shared components (attention, the MoE block
// and router, the dense FFN, DeltaNet, the KV cache) and whatever state a
// sequence needs beyond the KV cache. The shared shell (Model, State and
// the component files) never asks which architecture it runs; each
// architecture's file registers a builder that sets Model.arch, so adding
// one touches no other architecture's file.
//
// qwen3.go holds the transformer stack of qwen3 and qwen3moe (stack.go is
// its forward pass); qwen35moe.go the hybrid DeltaNet/gated-attention
// stack with shared experts and an MTP block.
type architecture interface {
	// kvLayer reports whether decoder layer i keeps a KV cache (recurrent
	// layers keep their own state instead).
	kvLayer(i int) bool
	// newSeq attaches the per-sequence state beyond the KV cache to a new
	// State (nothing for a plain transformer).
	newSeq(s *State)
	// forward runs validated tokens at s.Pos()..; see State.Forward.
	forward(ctx context.Context, s *State, tokens []int, all bool) ([]float32, error)
	// reset empties the state newSeq attached.
	reset(s *State)
	// truncate rolls the state newSeq attached back to n < s.Pos()
	// positions.
	truncate(s *State, n int)
	// seqBytes returns the bytes of the state newSeq attached: all of it,
	// and the part carried between tokens (recurrent state without
	// rollback history).
	seqBytes(s *State) (all, recurrent int64)
	// cutsVerify reports whether State.CutVerify applies (the pass's
	// positions are independent apart from attention).
	cutsVerify() bool
	// extraBytes and extraWeights are the bytes and weights read per token
	// by matrices Layer does not hold (zero for a plain transformer).
	extraBytes() int64
	extraWeights() float64
	// weightMatrix returns the matrix bound to "blk.<li>.<suffix>" that
	// the shared Layer does not hold, or nil (see Model.WeightMatrix).
	weightMatrix(li int, suffix string) *tensor.Matrix
}
