package model

import (
	"context"
	"math"
)

// RollbackWindow is how many of the most recent positions of a qwen35moe
// State can be dropped by Truncate without recomputation (speculative
// decoding rolls back at most its draft length). Truncating further back
// is still exact: the recurrent state is then recomputed from the token
// history on the next Forward.
const RollbackWindow = 16

// hybridState is the per-sequence state of a qwen35moe model beyond the KV
// cache of its attention layers: per DeltaNet layer the conv window and the
// recurrent state, plus the history that lets Truncate roll them back.
//
// Rollback keeps, per DeltaNet layer, a checkpoint of both states at
// position ckptPos and, for each position since, the token's conv input,
// its normalised q/k/v and its β and g. Truncate(n) with n ≥ ckptPos
// restores the checkpoint and replays the recurrence of positions
// ckptPos..n-1 with the same arithmetic as the forward pass, so the state
// is bit-identical to a fresh decode of the first n tokens.
type hybridState struct {
	layers  []recState // per decoder layer (empty for attention layers)
	window  int        // RollbackWindow
	ckptPos int        // position of the checkpoint
	recs    int        // recorded positions since ckptPos
	plan    historyPlan
	tokens  []int // every cached token (recomputation after a deep Truncate)
	stale   int   // >= 0: recurrent state must be recomputed for tokens[:stale]
	sc      hybridScratch
	// probe, if set (tests), observes intermediate values per position
	// and layer; the slice is only valid during the call.
	probe func(pos, layer int, kind probeKind, vals []float32)
}

// recState is one DeltaNet layer's state and rollback history.
type recState struct {
	S, ckS       []float32 // VHeads × HeadDim × HeadDim
	conv, ckConv []float32 // (ConvKernel-1) × convDim raw inputs, oldest first
	recM, recU   []float32 // window × convDim
	recBG        []float32 // window × 2·VHeads: β then g
}

// historyPlan says, for the Forward call in progress, at which token the
// checkpoint is taken (-1: kept) and where token t's record goes.
type historyPlan struct {
	ckptAt int // token index whose state (before it) becomes the checkpoint
	base   int // record slot of token 0 when ckptAt < 0
}

// slot returns the record slot of token t of the current pass, or -1.
func (p *historyPlan) slot(t int) int {
	if p.ckptAt < 0 {
		return p.base + t
	}
	if t < p.ckptAt {
		return -1
	}
	return t - p.ckptAt
}

// hybrid returns the sequence's recurrent state, or nil for a State of
// another architecture.
func (s *State) hybrid() *hybridState {
	hs, _ := s.seq.(*hybridState)
	return hs
}

func newHybridState(m *Model) *hybridState {
	hc := m.q35().HybridConfig
	C, D, VH := hc.convDim(), hc.HeadDim, hc.VHeads
	hs := &hybridState{window: RollbackWindow, stale: -1, layers: make([]recState, len(m.Layers))}
	for i := range m.Layers {
		if !m.q35().layers[i].recurrent {
			continue
		}
		w := hs.window
		hs.layers[i] = recState{
			S: make([]float32, VH*D*D), ckS: make([]float32, VH*D*D),
			conv: make([]float32, (hc.ConvKernel-1)*C), ckConv: make([]float32, (hc.ConvKernel-1)*C),
			recM: make([]float32, w*C), recU: make([]float32, w*C),
			recBG: make([]float32, w*2*VH),
		}
	}
	return hs
}

// planHistory decides, before a pass of n tokens at pos, whether the
// existing checkpoint can keep covering the history (at most window
// records) or a new one is taken during the pass.
func (hs *hybridState) planHistory(pos, n int) {
	r := pos - hs.ckptPos
	if r+n <= hs.window {
		hs.plan = historyPlan{ckptAt: -1, base: r}
		return
	}
	c := max(pos, pos+n-hs.window)
	hs.plan = historyPlan{ckptAt: c - pos}
}

// commitHistory records the effect of the finished pass on the history.
func (hs *hybridState) commitHistory(pos, n int) {
	if hs.plan.ckptAt >= 0 {
		hs.ckptPos = pos + hs.plan.ckptAt
	}
	hs.recs = pos + n - hs.ckptPos
}

// reset empties the recurrent state and its history.
func (hs *hybridState) reset() {
	for i := range hs.layers {
		l := &hs.layers[i]
		clear(l.S)
		clear(l.conv)
		clear(l.ckS)
		clear(l.ckConv)
	}
	hs.ckptPos, hs.recs, hs.stale = 0, 0, -1
	hs.tokens = hs.tokens[:0]
}

// truncate rolls the recurrent state back from pos to n < pos positions.
func (s *State) truncateHybrid(n int) {
	hs := s.hybrid()
	hs.tokens = hs.tokens[:n]
	if hs.stale >= 0 {
		hs.stale = min(hs.stale, n)
		return
	}
	if n < hs.ckptPos {
		hs.stale = n // recomputed by the next Forward
		return
	}
	hc := s.m.q35().HybridConfig
	C, D, VH, KH := hc.convDim(), hc.HeadDim, hc.VHeads, hc.KHeads
	keep := n - hs.ckptPos
	prev := hc.ConvKernel - 1
	for li := range hs.layers {
		rs := &hs.layers[li]
		if rs.S == nil {
			continue
		}
		copy(rs.S, rs.ckS)
		acc := s.hybrid().sc.acc
		if len(acc) < D {
			acc = make([]float32, D)
			s.hybrid().sc.acc = acc
		}
		for t := range keep {
			u := rs.recU[t*C : (t+1)*C]
			bg := rs.recBG[t*2*VH : (t+1)*2*VH]
			for hd := range VH {
				kh := hd % KH
				k := u[(KH+kh)*D : (KH+kh+1)*D]
				v := u[2*KH*D+hd*D : 2*KH*D+(hd+1)*D]
				decay := float32(math.Exp(float64(bg[VH+hd])))
				deltaUpdate(rs.S[hd*D*D:(hd+1)*D*D], k, v, nil, nil, acc[:D], decay, bg[hd])
			}
		}
		// The conv window before position n: raw inputs of n-prev..n-1.
		for w := range prev {
			p := n - prev + w
			dst := rs.conv[w*C : (w+1)*C]
			switch {
			case p >= hs.ckptPos:
				copy(dst, rs.recM[(p-hs.ckptPos)*C:])
			default: // in the checkpoint's window, which holds ckptPos-prev..ckptPos-1
				j := p - (hs.ckptPos - prev)
				copy(dst, rs.ckConv[j*C:(j+1)*C])
			}
		}
	}
	hs.recs = keep
}

// recompute rebuilds the recurrent state (and the attention cache) for
// tokens[:stale] after a Truncate past the rollback window.
func (s *State) recompute(ctx context.Context) error {
	hs := s.hybrid()
	toks := append([]int(nil), hs.tokens[:hs.stale]...)
	hs.reset()
	s.pos = 0
	if len(toks) == 0 {
		return nil
	}
	sink, route := s.Sink, s.OnRoute
	s.Sink, s.OnRoute = nil, nil
	defer func() { s.Sink, s.OnRoute = sink, route }()
	for i := 0; i < len(toks); i += 512 {
		if _, err := s.forwardHybrid(ctx, toks[i:min(i+512, len(toks))], false); err != nil {
			return err
		}
	}
	return nil
}

// seqBytes returns the bytes of the recurrent states: all of them (with
// their rollback checkpoint and per-token history) and the conv and
// recurrent states alone.
func (a *qwen35moe) seqBytes(s *State) (all, recurrent int64) {
	for _, l := range s.hybrid().layers {
		all += 4 * int64(len(l.S)+len(l.ckS)+len(l.conv)+len(l.ckConv)+len(l.recM)+len(l.recU)+len(l.recBG))
		recurrent += 4 * int64(len(l.S)+len(l.conv))
	}
	return all, recurrent
}

// HybridMatrixBytes returns the bytes of the matrices read per token that
// Layer does not hold: qwen35moe's DeltaNet projections and shared experts
// (zero for other architectures).
func (m *Model) HybridMatrixBytes() int64 {
	if a := m.q35(); a != nil {
		return a.activeBytes
	}
	return 0
}

// activeWeights is the number of DeltaNet and shared-expert weights used
// per token (for FLOPsPerToken).
func (hy *qwen35moe) activeWeights() float64 {
	var w float64
	for _, l := range hy.layers {
		for _, mt := range []*struct{ r, c int }{{l.QKV.Rows, l.QKV.Cols}, {l.Z.Rows, l.Z.Cols}, {l.Beta.Rows, l.Beta.Cols}, {l.Alpha.Rows, l.Alpha.Cols}, {l.Out.Rows, l.Out.Cols}, {l.ShGate.Rows, l.ShGate.Cols}, {l.ShUp.Rows, l.ShUp.Cols}, {l.ShDown.Rows, l.ShDown.Cols}} {
			w += float64(mt.r * mt.c)
		}
	}
	return w
}
