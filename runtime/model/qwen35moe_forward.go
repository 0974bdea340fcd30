package model

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/lesfarm/lesfarm/runtime/tensor"
)

// hybridScratch holds the qwen35moe forward buffers, grown to the largest
// batch seen.
type hybridScratch struct {
	n              int
	qg             []float32   // n × 2·Heads·HeadDim: query and output gate
	mix            []float32   // n × convDim: DeltaNet qkv before the conv
	u              []float32   // n × convDim: after conv, silu and L2 norms
	bg             []float32   // n × 2·VHeads: β then g
	work           [][]float32 // per v-head: 3·HeadDim recurrence scratch
	dn             dnJob
	dnHeads        func(h0, h1 int) // dn.heads, bound once (a method value allocates)
	z              []float32        // n × Inner: DeltaNet output gate
	b, a           []float32        // n × VHeads
	y              []float32        // n × Inner: DeltaNet readout, then gated norm
	acc            []float32        // HeadDim: rollback replay scratch
	shg, shu, shd  []float32        // shared expert: n × SharedFFN, n × Hidden
	normed         []float32        // n × Hidden: rms(x, output_norm) of the last pass
	shared         sharedFFN        // the current layer's shared expert (moeShared)
	prep           dnPrep           // DeltaNet conv and gates of a batch
	mmDst          [4][]float32
	mmM            [4]tensor.Matrix
	lastN, lastPos int
}

func (hs *hybridState) ensure(m *Model, n int) {
	sc := &hs.sc
	if n <= sc.n && sc.u != nil {
		return
	}
	hc := m.q35().HybridConfig
	sc.n = n
	sc.qg = grow(sc.qg, n*2*m.Heads*m.HeadDim)
	sc.mix = grow(sc.mix, n*hc.convDim())
	sc.u = grow(sc.u, n*hc.convDim())
	sc.bg = grow(sc.bg, n*2*hc.VHeads)
	if sc.work == nil {
		sc.work = make([][]float32, hc.VHeads)
		for w := range sc.work {
			sc.work[w] = make([]float32, 3*hc.HeadDim)
		}
	}
	sc.z = grow(sc.z, n*hc.Inner)
	sc.b = grow(sc.b, n*hc.VHeads)
	sc.a = grow(sc.a, n*hc.VHeads)
	sc.y = grow(sc.y, n*hc.Inner)
	sc.acc = grow(sc.acc, hc.HeadDim)
	sc.shg = grow(sc.shg, n*hc.SharedFFN)
	sc.shu = grow(sc.shu, n*hc.SharedFFN)
	sc.shd = grow(sc.shd, n*m.Hidden)
	sc.normed = grow(sc.normed, n*m.Hidden)
}

// forwardHybrid is Forward for qwen35moe (tokens already validated). A
// pass that fails part-way (cancelled, an expert read error) has advanced
// some layers' recurrent state: the state is then marked for
// recomputation from the token history, so the next Forward is exact.
func (s *State) forwardHybrid(ctx context.Context, tokens []int, all bool) (logits []float32, err error) {
	hs := s.hybrid()
	if hs.stale >= 0 {
		if err := s.recompute(ctx); err != nil {
			return nil, err
		}
	}
	defer func() {
		if err != nil {
			hs.tokens = hs.tokens[:s.pos]
			hs.stale = s.pos
		}
	}()
	m := s.m
	n := len(tokens)
	s.ensure(n)
	hs.ensure(m, n)
	sc := &s.sc
	H := m.Hidden
	x := sc.x[:n*H]
	for i, t := range tokens {
		if err := m.Embed.Row(t, x[i*H:(i+1)*H]); err != nil {
			return nil, fmt.Errorf("model: embedding row %d: %w", t, err)
		}
	}
	half := m.RopeDim / 2
	for i := range n {
		m.rope.fill(s.pos+i, sc.cos[i*half:(i+1)*half], sc.sin[i*half:(i+1)*half])
	}
	hs.planHistory(s.pos, n)
	if k := m.Experts.PredictK(); k > 0 {
		if err := s.predict(0, x, n, k); err != nil {
			return nil, err
		}
	}
	for li := range m.Layers {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		start := time.Now()
		if err := s.hybridLayer(ctx, li, n); err != nil {
			return nil, err
		}
		if s.Sink != nil {
			s.emitLayer(li, time.Since(start))
		}
	}
	normed := hs.sc.normed[:n*H]
	s.normRows(normed, x, m.OutNorm, n)
	hs.sc.lastN, hs.sc.lastPos = n, s.pos
	first := n - 1
	if all {
		first = 0
	}
	cnt := n - first
	sc.logits = grow(sc.logits, cnt*m.Vocab)
	if err := m.matmul(sc.logits, &m.Output, normed[first*H:], cnt); err != nil {
		return nil, fmt.Errorf("model: output: %w", err)
	}
	hs.tokens = append(hs.tokens[:s.pos], tokens...)
	hs.commitHistory(s.pos, n)
	s.pos += n
	return sc.logits, nil
}

// OutputHidden returns rms(x, output_norm) (llama.cpp's h_nextn, the input
// of the LM head and of the MTP block) at position pos, which must be one
// of the positions of the last Forward call; nil otherwise or for
// architectures without an MTP block. The slice is reused by the next call.
func (s *State) OutputHidden(pos int) []float32 {
	if s.hybrid() == nil {
		return nil
	}
	sc := &s.hybrid().sc
	i := pos - sc.lastPos
	if i < 0 || i >= sc.lastN || pos >= s.pos {
		return nil
	}
	H := s.m.Hidden
	return sc.normed[i*H : (i+1)*H]
}

// hybridLayer runs decoder block li of a qwen35moe model on the n rows of
// sc.x in place.
func (s *State) hybridLayer(ctx context.Context, li, n int) error {
	m := s.m
	L := &m.Layers[li]
	hl := &m.q35().layers[li]
	sc := &s.sc
	H := m.Hidden
	x, h := sc.x[:n*H], sc.h[:n*H]
	s.normRows(h, x, L.AttnNorm, n)
	var err error
	if hl.recurrent {
		err = s.deltaNet(li, n)
	} else {
		err = s.gatedAttention(li, L, n)
	}
	if err != nil {
		return err
	}
	for i := range x {
		x[i] += h[i]
	}
	s.hybrid().probeRows(s.pos, li, probeAttnResidual, x, H)
	if k := m.Experts.PredictK(); k > 0 && li+1 < len(m.Layers) {
		if err := s.predict(li+1, x, n, k); err != nil {
			return err
		}
	}
	if err := s.moeShared(ctx, li, L, hl, n); err != nil {
		return err
	}
	s.hybrid().probeRows(s.pos, li, probeLayerOut, x, H)
	return nil
}

// probeKind names a value a test probe observes (see hybridState.probe).
type probeKind int

const (
	probeAttnResidual probeKind = iota // x after the attention/DeltaNet residual (Hidden)
	probeLayerOut                      // x after the FFN (Hidden)
	probeSharedGate                    // the shared expert's sigmoid gate (1)
	probeBetaG                         // DeltaNet β then g (2·VHeads)
)

// probeRows reports n rows of width w of x, at positions pos.., to the
// test probe, if any.
func (hs *hybridState) probeRows(pos, layer int, kind probeKind, x []float32, w int) {
	if hs.probe == nil {
		return
	}
	for i := 0; i*w < len(x); i++ {
		hs.probe(pos+i, layer, kind, x[i*w:(i+1)*w])
	}
}

// moeShared runs the FFN of a qwen35moe block: rms(x, post_attention_norm),
// routed experts through the Source, and the gated shared expert, both
// added to sc.x.
func (s *State) moeShared(ctx context.Context, li int, L *Layer, hl *hybridLayer, n int) error {
	m := s.m
	sc := &s.sc
	H := m.Hidden
	x, h := sc.x[:n*H], sc.h[:n*H]
	s.normRows(h, x, L.FFNNorm, n)
	hsc := &s.hybrid().sc
	F := hl.ShGate.Rows
	g, u, d := hsc.shg[:n*F], hsc.shu[:n*F], hsc.shd[:n*H]
	// The shared expert runs with the routed ones when moe splits them by
	// expert between threads (moe_par.go), here otherwise.
	hsc.shared = sharedFFN{gate: &hl.ShGate, up: &hl.ShUp, down: &hl.ShDown, g: g, u: u, d: d}
	sc.shared = &hsc.shared
	err := s.moe(ctx, li, n)
	sc.shared = nil
	if err != nil {
		return err
	}
	if !hsc.shared.done {
		hsc.mmDst[0], hsc.mmDst[1] = g, u
		hsc.mmM[0], hsc.mmM[1] = hl.ShGate, hl.ShUp
		if err := tensor.MatMulMulti(m.pool, hsc.mmDst[:2], hsc.mmM[:2], h, n); err != nil {
			return fmt.Errorf("model: blk.%d.ffn_gate/up_shexp: %w", li, err)
		}
		tensor.SiLUMul(g, u)
		if err := m.matmul(d, &hl.ShDown, g, n); err != nil {
			return fmt.Errorf("model: blk.%d.ffn_down_shexp: %w", li, err)
		}
	}
	hsc.shared = sharedFFN{}
	if probe := s.hybrid().probe; probe != nil {
		for i := range n {
			probe(s.pos+i, li, probeSharedGate, []float32{sigmoid(tensor.Dot(hl.ShGateInp, h[i*H:(i+1)*H]))})
		}
	}
	rp := s.rowPar()
	rp.gateInp, rp.d = hl.ShGateInp, d
	s.forRows(rowShared, n, 2*H)
	return nil
}

// gatedAttention computes Wo·(attention ⊙ sigmoid(gate)) of the n rows of
// sc.h into sc.h, caching keys and values at Pos()...
func (s *State) gatedAttention(li int, L *Layer, n int) error {
	m := s.m
	sc, hsc := &s.sc, &s.hybrid().sc
	qDim, kvDim, vDim := m.Heads*m.HeadDim, m.KVHeads*m.HeadDim, m.KVHeads*m.ValueDim
	qg := hsc.qg[:n*2*qDim]
	hsc.mmDst[0], hsc.mmDst[1], hsc.mmDst[2] = qg, sc.k[:n*kvDim], sc.v[:n*vDim]
	hsc.mmM[0], hsc.mmM[1], hsc.mmM[2] = L.Q, L.K, L.V
	if err := tensor.MatMulMulti(m.pool, hsc.mmDst[:3], hsc.mmM[:3], sc.h[:n*m.Hidden], n); err != nil {
		return fmt.Errorf("model: blk.%d.attn_q/k/v: %w", li, err)
	}
	rp := s.rowPar()
	rp.li, rp.L, rp.x = li, L, qg
	s.forRows(rowAttnPre, n, 3*(m.Heads+m.KVHeads)*m.HeadDim)
	s.attention(li, n)
	rp.x = qg
	s.forRows(rowAttnGate, n, expWork*m.Heads*m.ValueDim)
	att := sc.att[:n*m.Heads*m.ValueDim]
	if err := m.matmul(sc.h, &L.O, att, n); err != nil {
		return fmt.Errorf("model: blk.%d.attn_output: %w", li, err)
	}
	return nil
}

// attnPreRow copies token i's query heads out of qg (query and gate
// interleaved per head), applies the q and k head norms and RoPE, and
// caches its key and value at Pos()+i.
func (s *State) attnPreRow(li int, L *Layer, qg []float32, i int) {
	m := s.m
	sc := &s.sc
	qDim, kvDim, vDim := m.Heads*m.HeadDim, m.KVHeads*m.HeadDim, m.KVHeads*m.ValueDim
	D, half := m.HeadDim, m.RopeDim/2
	kc, vc := s.k[li], s.v[li]
	cos, sin := sc.cos[i*half:(i+1)*half], sc.sin[i*half:(i+1)*half]
	for hd := range m.Heads {
		q := sc.q[i*qDim+hd*D : i*qDim+(hd+1)*D]
		copy(q, qg[i*2*qDim+hd*2*D:])
		rmsNorm(q, q, L.QNorm, m.Eps)
		m.rope.apply(q, cos, sin)
	}
	for hd := range m.KVHeads {
		k := sc.k[i*kvDim+hd*D : i*kvDim+(hd+1)*D]
		rmsNorm(k, k, L.KNorm, m.Eps)
		m.rope.apply(k, cos, sin)
	}
	p := s.pos + i
	copy(kc[p*kvDim:(p+1)*kvDim], sc.k[i*kvDim:(i+1)*kvDim])
	copy(vc[p*vDim:(p+1)*vDim], sc.v[i*vDim:(i+1)*vDim])
}

// deltaNet computes the Gated DeltaNet output of the n rows of sc.h into
// sc.h, advancing layer li's conv and recurrent state token by token.
func (s *State) deltaNet(li, n int) error {
	m := s.m
	hc := m.q35().HybridConfig
	hl := &m.q35().layers[li]
	sc, hsc := &s.sc, &s.hybrid().sc
	C, D, VH := hc.convDim(), hc.HeadDim, hc.VHeads
	mix, z, b, a := hsc.mix[:n*C], hsc.z[:n*hc.Inner], hsc.b[:n*VH], hsc.a[:n*VH]
	hsc.mmDst[0], hsc.mmDst[1], hsc.mmDst[2], hsc.mmDst[3] = mix, z, b, a
	hsc.mmM[0], hsc.mmM[1], hsc.mmM[2], hsc.mmM[3] = hl.QKV, hl.Z, hl.Beta, hl.Alpha
	if err := tensor.MatMulMulti(m.pool, hsc.mmDst[:4], hsc.mmM[:4], sc.h[:n*m.Hidden], n); err != nil {
		return fmt.Errorf("model: blk.%d.attn_qkv/attn_gate/ssm_beta/ssm_alpha: %w", li, err)
	}
	// Conv, L2 norms and gates of the batch (deltanet_prep.go), recording
	// the rollback history.
	U, BG := hsc.u[:n*C], hsc.bg[:n*2*VH]
	prep := &hsc.prep
	prep.s, prep.li, prep.n = s, li, n
	prep.mix, prep.U, prep.BG, prep.b, prep.a = mix, U, BG, b, a
	prep.run()
	prep.mix, prep.U, prep.BG, prep.b, prep.a = nil, nil, nil, nil, nil
	if s.hybrid().probe != nil {
		for t := range n {
			s.hybrid().probe(s.pos+t, li, probeBetaG, BG[t*2*VH:(t+1)*2*VH])
		}
	}
	// The recurrence and gated norm of each v-head over all n tokens; the
	// heads are independent, so with several threads the pool splits them
	// (bit-identical whatever the split).
	job := &hsc.dn
	*job = dnJob{s: s, li: li, n: n, U: U, BG: BG, z: z}
	if m.threads < 2 || n*VH*D*D < 1<<16 {
		job.heads(0, VH)
	} else {
		if hsc.dnHeads == nil {
			hsc.dnHeads = job.heads
		}
		m.pool.For(VH, hsc.dnHeads)
	}
	*job = dnJob{}
	y := hsc.y[:n*hc.Inner]
	if err := m.matmul(sc.h, &hl.Out, y, n); err != nil {
		return fmt.Errorf("model: blk.%d.ssm_out: %w", li, err)
	}
	return nil
}

// dnJob is one DeltaNet layer's recurrence over a batch: the inputs
// deltaNet prepared, shared by the head workers.
type dnJob struct {
	s     *State
	li, n int
	U, BG []float32 // n × convDim conv outputs, n × 2·VHeads gates
	z     []float32 // n × Inner output gate
}

// heads runs the recurrence and gated norm of v-heads [h0, h1) over all
// tokens, each head with its own scratch. Token t's pass over the state
// also takes Sᵀk of token t+1 (deltaStep's kn), so a prefill reads each
// head's state once per token.
func (j *dnJob) heads(h0, h1 int) {
	m := j.s.m
	hc := m.q35().HybridConfig
	hl := &m.q35().layers[j.li]
	rs := &j.s.hybrid().layers[j.li]
	hsc := &j.s.hybrid().sc
	hist := &j.s.hybrid().plan
	C, D, VH, KH := hc.convDim(), hc.HeadDim, hc.VHeads, hc.KHeads
	scale := float32(1 / math.Sqrt(float64(D)))
	for hd := h0; hd < h1; hd++ {
		scr := hsc.work[hd]
		qs, acc, kn := scr[:D], scr[D:2*D], scr[2*D:3*D]
		S := rs.S[hd*D*D : (hd+1)*D*D]
		M := tensor.Matrix{Type: tensor.F32, Rows: D, Cols: D, Data: f32Bytes(S)}
		kh := hd % KH
		key := func(t int) []float32 {
			u := j.U[t*C : (t+1)*C]
			return u[(KH+kh)*D : (KH+kh+1)*D]
		}
		for t := range j.n {
			if t == hist.ckptAt {
				copy(rs.ckS[hd*D*D:(hd+1)*D*D], S)
			}
			u := j.U[t*C : (t+1)*C]
			q := u[kh*D : (kh+1)*D]
			for i := range qs {
				qs[i] = q[i] * scale
			}
			k := key(t)
			if t == 0 {
				if err := tensor.MatVec(nil, acc, M, k); err != nil {
					panic(err) // shapes are fixed at load; cannot happen
				}
			} else {
				copy(acc, kn)
			}
			var k2, kdot []float32
			if t+1 < j.n {
				k2, kdot = key(t+1), kn
			}
			v := u[2*KH*D+hd*D : 2*KH*D+(hd+1)*D]
			bg := j.BG[t*2*VH : (t+1)*2*VH]
			decay := float32(math.Exp(float64(bg[VH+hd])))
			o := hsc.y[t*hc.Inner+hd*D : t*hc.Inner+(hd+1)*D]
			deltaStep(S, k, v, qs, o, acc, decay, bg[hd], k2, kdot)
			rmsNorm(o, o, hl.Norm, m.Eps)
			// o ⊙ silu(z), computed as silu(z) ⊙ o (the same products) in
			// qs, free once deltaStep has read it.
			copy(qs, j.z[t*hc.Inner+hd*D:t*hc.Inner+(hd+1)*D])
			tensor.SiLUMul(qs, o)
			copy(o, qs)
		}
	}
}
