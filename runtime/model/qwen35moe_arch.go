package model

import "context"

// kvLayer reports whether layer i is a full-attention layer: DeltaNet
// layers keep a recurrent state (qwen35moe_state.go) instead of a KV cache.
func (a *qwen35moe) kvLayer(i int) bool { return !a.layers[i].recurrent }

// newSeq attaches the recurrent state to a new sequence.
func (a *qwen35moe) newSeq(s *State) { s.seq = newHybridState(s.m) }

// forward is qwen35moe_forward.go's forwardHybrid.
func (a *qwen35moe) forward(ctx context.Context, s *State, tokens []int, all bool) ([]float32, error) {
	return s.forwardHybrid(ctx, tokens, all)
}

// reset empties the recurrent state and its token history.
func (a *qwen35moe) reset(s *State) { s.hybrid().reset() }

// truncate rolls the recurrent state back exactly (see RollbackWindow).
func (a *qwen35moe) truncate(s *State, n int) { s.truncateHybrid(n) }

// cutsVerify is false: a DeltaNet layer carries state from each position
// to the next, so later positions cannot be dropped mid-pass.
func (a *qwen35moe) cutsVerify() bool { return false }

// extraBytes is the bytes of DeltaNet and shared-expert matrices read per
// token.
func (a *qwen35moe) extraBytes() int64 { return a.activeBytes }

// extraWeights is the number of DeltaNet and shared-expert weights used per
// token.
func (a *qwen35moe) extraWeights() float64 { return a.activeWeights() }
