package model

// RecurrentGeometry is the shape of a hybrid model's recurrent layers as
// its GGUF metadata gives it, enough to size their per-sequence state
// before the model is loaded (the agent's RAM check works from the
// coordinator's header facts, protocol.RecurrentFacts).
type RecurrentGeometry struct {
	Layers       int // recurrent (Gated DeltaNet) layers
	ConvKernel   int // ssm.conv_kernel
	ConvChannels int // 2 × k-heads × state size + v-heads × state size
	Heads        int // ssm.time_step_rank (v-heads)
	StateSize    int // ssm.state_size
}

// SequenceStateBytes returns the bytes of recurrent state a qwen35moe
// State holds for one sequence, all F32: per recurrent layer the DeltaNet
// state (Heads × StateSize²) and the conv window ((ConvKernel−1) ×
// ConvChannels), each twice (live, and the checkpoint Truncate rolls back
// to), plus the rollback history of RollbackWindow positions (the conv
// input and the convolved q/k/v, ConvChannels each, and β and g per
// head). It equals State.StateBytes without the KV cache; a test keeps
// the two in step.
func (g RecurrentGeometry) SequenceStateBytes() int64 {
	if g.Layers <= 0 {
		return 0
	}
	state := int64(g.Heads) * int64(g.StateSize) * int64(g.StateSize)
	conv := int64(max(g.ConvKernel-1, 0)) * int64(g.ConvChannels)
	history := int64(RollbackWindow) * (2*int64(g.ConvChannels) + 2*int64(g.Heads))
	return 4 * int64(g.Layers) * (2*state + 2*conv + history)
}

// Recurrent returns the model's recurrent geometry (zero Layers for a
// model without recurrent layers).
func (m *Model) Recurrent() RecurrentGeometry {
	a := m.q35()
	if a == nil {
		return RecurrentGeometry{}
	}
	hc := a.HybridConfig
	g := RecurrentGeometry{ConvKernel: hc.ConvKernel, ConvChannels: hc.convDim(), Heads: hc.VHeads, StateSize: hc.HeadDim}
	for _, l := range a.layers {
		if l.recurrent {
			g.Layers++
		}
	}
	return g
}
