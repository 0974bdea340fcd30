package model

import (
	"context"
	"fmt"
	"slices"
)

// MTP is one sequence of a qwen35moe model's NextN (multi-token
// prediction) block used as a drafter: at MTP position p it takes the
// token x_p and the target's final-norm hidden state at p−1
// (State.OutputHidden) and returns logits predicting x_{p+1}:
//
//	y = eh_proj · [rms(embed(x_p), enorm) ; rms(h, hnorm)]
//	y = y + GatedAttention(rms(y, attn_norm))      (own KV cache, RoPE position p)
//	y = y + MoE(rms(y, post_attention_norm))       (routed + gated shared expert)
//	logits = W_output · rms(y, shared_head_norm)
//
// Its routed experts come through the model's moe.Source as layer
// len(Layers) (the block's index in the file), so the LES expert store
// streams them like any other layer's. An MTP is not safe for concurrent
// use, and shares the model's thread pool like a State.
type MTP struct {
	st   *State
	blk  *mtpBlock
	in   []float32 // n × 2·Hidden
	zero []float32
}

// NewMTP returns an empty MTP sequence able to hold maxTokens positions
// (as NewState), or an error when the model has no NextN block.
func (m *Model) NewMTP(maxTokens int) (*MTP, error) {
	if !m.HasMTP() {
		return nil, fmt.Errorf("model: %s has no MTP/NextN block (nextn_predict_layers = 0)", m.Arch)
	}
	if maxTokens <= 0 {
		maxTokens = min(m.Context, 4096)
	}
	if maxTokens > m.Context {
		return nil, fmt.Errorf("model: %d positions exceed the context length %d of %s", maxTokens, m.Context, m.Arch)
	}
	blk := m.q35().mtp
	// A view of the model whose layer list ends with the NextN block, so
	// the shared attention, routing and expert code address it by index.
	view := *m
	view.Layers = append(slices.Clip(m.Layers), blk.layer)
	view.closers = nil
	s := &State{m: &view, max: maxTokens}
	n := len(view.Layers)
	s.k, s.v = make([][]float32, n), make([][]float32, n)
	s.k[blk.index] = make([]float32, maxTokens*m.KVHeads*m.HeadDim)
	s.v[blk.index] = make([]float32, maxTokens*m.KVHeads*m.ValueDim)
	s.pred = make([][]int, n)
	s.sc.layerFn = s.runExpert
	s.seq = &hybridState{stale: -1}
	return &MTP{st: s, blk: blk, zero: make([]float32, m.Hidden)}, nil
}

// Pos returns the number of cached MTP positions.
func (d *MTP) Pos() int { return d.st.pos }

// Reset empties the MTP cache.
func (d *MTP) Reset() { d.st.pos, d.st.hybrid().sc.lastN = 0, 0 }

// Truncate drops cached MTP positions from n on.
func (d *MTP) Truncate(n int) {
	if n >= 0 && n < d.st.pos {
		d.st.pos = n
	}
}

// SetOnRoute observes the NextN block's routing decisions (layer index
// len(Layers)).
func (d *MTP) SetOnRoute(f RouteFunc) { d.st.OnRoute = f }

// Forward runs the NextN block on tokens at positions Pos()..Pos()+n-1.
// hidden holds, per token, the target's OutputHidden of the previous
// position (n × Hidden floats); a nil hidden, or a row that is all nil
// for position 0, means the zero vector llama.cpp's driver uses at p = 0.
// It returns logits for the last position, or for all n when all is set;
// the slice is reused by the next call.
func (d *MTP) Forward(ctx context.Context, tokens []int, hidden []float32, all bool) ([]float32, error) {
	s := d.st
	m := s.m
	n := len(tokens)
	H := m.Hidden
	switch {
	case n == 0:
		return nil, fmt.Errorf("model: MTP forward with no tokens")
	case s.pos+n > s.max:
		return nil, fmt.Errorf("model: %d cached + %d new MTP positions exceed the cache capacity %d", s.pos, n, s.max)
	case hidden != nil && len(hidden) != n*H:
		return nil, fmt.Errorf("model: MTP forward with %d hidden values for %d tokens of width %d", len(hidden), n, H)
	}
	for _, t := range tokens {
		if t < 0 || t >= m.Vocab {
			return nil, fmt.Errorf("model: token id %d outside the vocabulary of %d", t, m.Vocab)
		}
	}
	s.ensure(n)
	s.hybrid().ensure(m, n)
	sc := &s.sc
	blk := d.blk
	d.in = grow(d.in, n*2*H)
	x := sc.x[:n*H]
	for i, t := range tokens {
		e := d.in[i*2*H : i*2*H+H]
		if err := blk.Embed.Row(t, e); err != nil {
			return nil, fmt.Errorf("model: embedding row %d: %w", t, err)
		}
		rmsNorm(e, e, blk.ENorm, m.Eps)
		h := d.zero
		if hidden != nil {
			h = hidden[i*H : (i+1)*H]
		}
		rmsNorm(d.in[i*2*H+H:(i+1)*2*H], h, blk.HNorm, m.Eps)
	}
	if err := m.matmul(x, &blk.EhProj, d.in[:n*2*H], n); err != nil {
		return nil, fmt.Errorf("model: nextn.eh_proj: %w", err)
	}
	half := m.RopeDim / 2
	for i := range n {
		m.rope.fill(s.pos+i, sc.cos[i*half:(i+1)*half], sc.sin[i*half:(i+1)*half])
	}
	li := blk.index
	L := &m.Layers[li]
	h := sc.h[:n*H]
	for i := range n {
		rmsNorm(h[i*H:(i+1)*H], x[i*H:(i+1)*H], L.AttnNorm, m.Eps)
	}
	if err := s.gatedAttention(li, L, n); err != nil {
		return nil, err
	}
	for i := range x {
		x[i] += h[i]
	}
	if err := s.moeShared(ctx, li, L, &blk.hl, n); err != nil {
		return nil, err
	}
	first := n - 1
	if all {
		first = 0
	}
	cnt := n - first
	normed := s.hybrid().sc.normed[:cnt*H]
	for i := range cnt {
		rmsNorm(normed[i*H:(i+1)*H], x[(first+i)*H:(first+i+1)*H], blk.HeadNorm, m.Eps)
	}
	sc.logits = grow(sc.logits, cnt*m.Vocab)
	if err := m.matmul(sc.logits, &blk.Output, normed, cnt); err != nil {
		return nil, fmt.Errorf("model: MTP output: %w", err)
	}
	s.hybrid().sc.lastN = cnt
	s.pos += n
	return sc.logits, nil
}

// LastHidden returns rms(y, shared_head_norm) of the last position of the
// last Forward: the hidden state a chained draft feeds back as the next
// position's h. The slice is reused by the next call.
func (d *MTP) LastHidden() []float32 {
	H := d.st.m.Hidden
	n := d.st.hybrid().sc.lastN
	if n == 0 {
		return nil
	}
	return d.st.hybrid().sc.normed[(n-1)*H : n*H]
}

// StateBytes returns the memory of the MTP block's KV cache.
func (d *MTP) StateBytes() int64 { return d.st.StateBytes() }
