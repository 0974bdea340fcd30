package model

import (
	"context"
	"fmt"
	"time"

	"github.com/lesfarm/lesfarm/runtime/moe"
	"github.com/lesfarm/lesfarm/runtime/tensor"
	"github.com/lesfarm/lesfarm/runtime/trace"
)

// LayerReporter is implemented by expert sources that know per-layer
// statistics (hits, misses, prefetch use, stall). The model calls it right
// before emitting each LayerEvent so the event carries them.
type LayerReporter interface {
	FillLayerEvent(ev *trace.LayerEvent)
}

// RouteFunc observes the router's choice for one position and layer:
// experts in descending probability and their renormalised weights. The
// slices are only valid during the call.
type RouteFunc func(pos, layer int, experts []int, weights []float32)

// State is one sequence: its float32 KV cache, the number of cached
// positions and the scratch buffers of the forward pass. It is not safe for
// concurrent use.
type State struct {
	m   *Model
	pos int // cached positions
	max int // KV capacity in positions
	k   [][]float32
	v   [][]float32

	// Sink receives a LayerEvent per (step, layer); nil discards.
	Sink trace.Sink
	// Step is copied into emitted events; the generation loop sets it.
	Step int
	// OnRoute, if set, observes every routing decision (tests, analysis).
	OnRoute RouteFunc
	// CutVerify, if set, lets a pass over several positions drop its later
	// positions where they would read experts the earlier ones do not
	// need, and limits the pass's lookahead to position 0 (verifycut.go;
	// qwen3moe-style models only). Forward then caches and returns only
	// the kept positions (with all false, the last kept one's logits).
	CutVerify bool
	// CutSlack is how many new expert reads per layer a drafted position
	// may add before CutVerify drops it (0: none).
	CutSlack int
	// Cut counts the positions CutVerify dropped.
	Cut  int
	keep int // positions the current pass still computes

	sc      scratch
	layerEv trace.LayerEvent
	pred    [][]int // per layer: experts predicted by lookahead for this step
	seq     any     // the architecture's state beyond the KV cache (architecture.newSeq)
}

// scratch holds the forward-pass buffers, grown to the largest batch seen.
type scratch struct {
	n                int
	x, h             []float32 // n × Hidden
	q, k, v, att     []float32 // n × q/kv dims
	cos, sin         []float32 // n × RopeDim/2
	scores           []float32 // max positions
	scoresPar        [][]float32
	mmDst            [3][]float32 // MatMulMulti arguments, reused
	mmM              [3]tensor.Matrix
	logitsIn, logits []float32
	router           []float32 // n × Experts
	probs            []float32 // Experts
	topk             []int     // n × K
	topw             []float32 // n × K
	eout             []float32 // n × K × Hidden: each expert's rows, experts in union order
	eloc             []int32   // n × K: the eout row of (token, slot)
	ebase            []int32   // per expert: its first eout row
	union            []int
	assign           [][]int32   // per expert: token*K+slot
	ein, eg, eu      []float32   // per-expert batches
	rows             tensor.Rows // sc.h of the layer's positions, quantized once for all experts
	sel              []int32     // positions routed to the current expert
	ffg, ffu         []float32   // dense FFN n × FFN
	predIdx          []int
	predMark         []bool
	cutNeed          []bool // verifyCut: experts the kept positions need
	layerFn          func(i int, w moe.Weights) error
	layerExperts     []int
	layerIdx         int
	curN             int
	par              *expertPar // experts split by expert between threads (moe_par.go)
	shared           *sharedFFN // the layer's shared expert, for moe to run with the routed ones
	rp               *rowPar    // per-row steps split between threads (rowpar.go)
	cacc             []float32  // n × Hidden: the MoE combine's sums
}

// NewState returns an empty sequence able to hold maxTokens positions
// (the model's context length, at most 4096, when maxTokens <= 0).
func (m *Model) NewState(maxTokens int) (*State, error) {
	if maxTokens <= 0 {
		maxTokens = min(m.Context, 4096)
	}
	if maxTokens > m.Context {
		return nil, fmt.Errorf("model: %d positions exceed the context length %d of %s", maxTokens, m.Context, m.Arch)
	}
	s := &State{m: m, max: maxTokens}
	kvDim, vDim := m.KVHeads*m.HeadDim, m.KVHeads*m.ValueDim
	s.k = make([][]float32, len(m.Layers))
	s.v = make([][]float32, len(m.Layers))
	for i := range m.Layers {
		if !m.arch.kvLayer(i) {
			continue // recurrent layers keep their own state instead
		}
		s.k[i] = make([]float32, maxTokens*kvDim)
		s.v[i] = make([]float32, maxTokens*vDim)
	}
	m.arch.newSeq(s)
	s.pred = make([][]int, len(m.Layers))
	s.sc.layerFn = s.runExpert
	return s, nil
}

// Pos returns the number of cached positions.
func (s *State) Pos() int { return s.pos }

// Cap returns the KV capacity in positions.
func (s *State) Cap() int { return s.max }

// Reset empties the cache.
func (s *State) Reset() {
	s.pos = 0
	s.m.arch.reset(s)
}

// Truncate drops cached positions from n on (for speculative decoding).
// Recurrent layers roll back exactly too (see RollbackWindow).
func (s *State) Truncate(n int) {
	if n >= 0 && n < s.pos {
		s.m.arch.truncate(s, n)
		s.pos = n
	}
}

// StateBytes returns the memory of the sequence's model state: the KV cache
// of the attention layers plus the architecture's own state (for recurrent
// layers, the conv and recurrent states, their rollback checkpoint and
// per-token history).
func (s *State) StateBytes() int64 {
	var n int64
	for i := range s.k {
		n += 4 * int64(len(s.k[i])+len(s.v[i]))
	}
	all, _ := s.m.arch.seqBytes(s)
	return n + all
}

// RecurrentStateBytes returns the bytes of the recurrent layers' conv and
// recurrent states alone (what one sequence carries between tokens, without
// the rollback history); zero for models without recurrent layers.
func (s *State) RecurrentStateBytes() int64 {
	_, rec := s.m.arch.seqBytes(s)
	return rec
}

func grow[T any](b []T, n int) []T {
	if cap(b) < n {
		return make([]T, n)
	}
	return b[:n]
}

func (s *State) ensure(n int) {
	m := s.m
	sc := &s.sc
	sc.curN = n
	if n <= sc.n && sc.x != nil {
		return
	}
	sc.n = n
	H := m.Hidden
	sc.x = grow(sc.x, n*H)
	sc.h = grow(sc.h, n*H)
	sc.q = grow(sc.q, n*m.Heads*m.HeadDim)
	sc.k = grow(sc.k, n*m.KVHeads*m.HeadDim)
	sc.v = grow(sc.v, n*m.KVHeads*m.ValueDim)
	sc.att = grow(sc.att, n*m.Heads*m.ValueDim)
	sc.cos = grow(sc.cos, n*m.RopeDim/2)
	sc.sin = grow(sc.sin, n*m.RopeDim/2)
	if m.Experts != nil {
		E, K := m.ExpertCount, m.ExpertsUsed
		sc.router = grow(sc.router, n*E)
		sc.probs = grow(sc.probs, E)
		sc.topk = grow(sc.topk, n*K)
		sc.topw = grow(sc.topw, n*K)
		sc.eout = grow(sc.eout, n*K*H)
		sc.cacc = grow(sc.cacc, n*H)
		sc.eloc = grow(sc.eloc, n*K)
		sc.ebase = grow(sc.ebase, E)
		sc.union = grow(sc.union, E)[:0]
		if sc.assign == nil {
			sc.assign = make([][]int32, E)
		}
		sc.ein = grow(sc.ein, n*H)
		sc.eg = grow(sc.eg, n*m.ExpertFFN)
		sc.eu = grow(sc.eu, n*m.ExpertFFN)
		sc.predMark = grow(sc.predMark, E)
	}
	if m.FFN > 0 {
		sc.ffg = grow(sc.ffg, n*m.FFN)
		sc.ffu = grow(sc.ffu, n*m.FFN)
	}
}

// matmul computes dst = m·x for n rows of x.
func (md *Model) matmul(dst []float32, m *tensor.Matrix, x []float32, n int) error {
	if n == 1 {
		return tensor.MatVec(md.pool, dst[:m.Rows], *m, x[:m.Cols])
	}
	return tensor.MatMul(md.pool, dst[:n*m.Rows], *m, x[:n*m.Cols], n)
}

// Forward runs tokens through the model at positions Pos()..Pos()+len-1,
// appends them to the cache and returns logits: for the last position only
// (Vocab floats), or for every position (len(tokens) × Vocab) when all is
// set. The returned slice is reused by the next call.
func (s *State) Forward(ctx context.Context, tokens []int, all bool) ([]float32, error) {
	m := s.m
	n := len(tokens)
	if n == 0 {
		return nil, fmt.Errorf("model: forward with no tokens")
	}
	if s.pos+n > s.max {
		return nil, fmt.Errorf("model: %d cached + %d new positions exceed the cache capacity %d (context length %d)", s.pos, n, s.max, m.Context)
	}
	for _, t := range tokens {
		if t < 0 || t >= m.Vocab {
			return nil, fmt.Errorf("model: token id %d outside the vocabulary of %d", t, m.Vocab)
		}
	}
	if b, ok := m.Experts.(moe.Batcher); ok {
		b.Batch(n)
	}
	return m.arch.forward(ctx, s, tokens, all)
}

// emitLayer sends the LayerEvent of layer li, reusing one event struct.
func (s *State) emitLayer(li int, d time.Duration) {
	ev := &s.layerEv
	missed := ev.Missed[:0] // reused, like the event
	*ev = trace.LayerEvent{Step: s.Step, Layer: li, Compute: d, Predicted: s.pred[li], Missed: missed}
	if s.m.Layers[li].Router != nil {
		ev.Selected = s.sc.union
	}
	if r, ok := s.m.Experts.(LayerReporter); ok {
		r.FillLayerEvent(ev)
	}
	s.Sink.Layer(ev)
}

// layer runs block li on the n rows of sc.x in place.
func (s *State) layer(ctx context.Context, li int, n int) error {
	m := s.m
	L := &m.Layers[li]
	sc := &s.sc
	H := m.Hidden
	x, h := sc.x[:n*H], sc.h[:n*H]
	s.normRows(h, x, L.AttnNorm, n)
	qDim, kvDim, vDim := m.Heads*m.HeadDim, m.KVHeads*m.HeadDim, m.KVHeads*m.ValueDim
	// q, k and v share their input: one pass quantizes it once.
	sc.mmDst[0], sc.mmDst[1], sc.mmDst[2] = sc.q[:n*qDim], sc.k[:n*kvDim], sc.v[:n*vDim]
	sc.mmM[0], sc.mmM[1], sc.mmM[2] = L.Q, L.K, L.V
	if err := tensor.MatMulMulti(m.pool, sc.mmDst[:3], sc.mmM[:3], h, n); err != nil {
		return fmt.Errorf("model: blk.%d.attn_q/k/v: %w", li, err)
	}
	D, half := m.HeadDim, m.RopeDim/2
	kc, vc := s.k[li], s.v[li]
	for i := range n {
		cos, sin := sc.cos[i*half:(i+1)*half], sc.sin[i*half:(i+1)*half]
		for hd := range m.Heads {
			q := sc.q[i*qDim+hd*D : i*qDim+(hd+1)*D]
			if L.QNorm != nil {
				rmsNorm(q, q, L.QNorm, m.Eps)
			}
			m.rope.apply(q, cos, sin)
		}
		for hd := range m.KVHeads {
			k := sc.k[i*kvDim+hd*D : i*kvDim+(hd+1)*D]
			if L.KNorm != nil {
				rmsNorm(k, k, L.KNorm, m.Eps)
			}
			m.rope.apply(k, cos, sin)
		}
		p := s.pos + i
		copy(kc[p*kvDim:(p+1)*kvDim], sc.k[i*kvDim:(i+1)*kvDim])
		copy(vc[p*vDim:(p+1)*vDim], sc.v[i*vDim:(i+1)*vDim])
	}
	s.attention(li, n)
	// x += Wo·att (ffn_inp).
	if err := m.matmul(h, &L.O, sc.att, n); err != nil {
		return fmt.Errorf("model: blk.%d.attn_output: %w", li, err)
	}
	for i := range x {
		x[i] += h[i]
	}
	if L.Router != nil {
		if k := m.Experts.PredictK(); k > 0 && li+1 < len(m.Layers) && m.Layers[li+1].Router != nil {
			if err := s.predict(li+1, x, n, k); err != nil {
				return err
			}
		}
	}
	s.normRows(h, x, L.FFNNorm, n)
	if L.Router != nil {
		return s.moe(ctx, li, n)
	}
	return s.dense(li, n)
}

// dense runs a SwiGLU FFN on sc.h and adds it to sc.x.
func (s *State) dense(li, n int) error {
	m := s.m
	L := &m.Layers[li]
	sc := &s.sc
	F := m.FFN
	g, u := sc.ffg[:n*F], sc.ffu[:n*F]
	sc.mmDst[0], sc.mmDst[1] = g, u
	sc.mmM[0], sc.mmM[1] = *L.Gate, *L.Up
	if err := tensor.MatMulMulti(m.pool, sc.mmDst[:2], sc.mmM[:2], sc.h[:n*m.Hidden], n); err != nil {
		return fmt.Errorf("model: blk.%d.ffn_gate/up: %w", li, err)
	}
	tensor.SiLUMul(g, u)
	if err := m.matmul(sc.h, L.Down, g, n); err != nil {
		return fmt.Errorf("model: blk.%d.ffn_down: %w", li, err)
	}
	x := sc.x[:n*m.Hidden]
	for i := range x {
		x[i] += sc.h[i]
	}
	return nil
}

// route computes softmax router probabilities of the n rows of in with
// layer li's router into sc.router.
func (s *State) route(li int, in []float32, n int) error {
	m := s.m
	E := m.ExpertCount
	if err := m.matmul(s.sc.router, m.Layers[li].Router, in, n); err != nil {
		return fmt.Errorf("model: blk.%d.ffn_gate_inp: %w", li, err)
	}
	s.forRows(rowSoftmax, n, expWork*E)
	return nil
}

// predict applies layer target's ffn_norm and router to the n rows of x
// (the previous layer's post-attention residual, or the embeddings for
// layer 0), takes the top k per row and prefetches their union (for one
// row, the top k in rank order).
func (s *State) predict(target int, x []float32, n, k int) error {
	m := s.m
	sc := &s.sc
	H, E := m.Hidden, m.ExpertCount
	if k > E {
		k = E
	}
	if s.CutVerify && s.m.arch.cutsVerify() {
		n = 1 // drafted positions ride on resident experts (verifycut.go)
	}
	in := sc.ein[:n*H]
	s.normRows(in, x[:n*H], m.Layers[target].FFNNorm, n)
	if err := s.route(target, in, n); err != nil {
		return err
	}
	sc.predIdx = grow(sc.predIdx, k)
	mark := sc.predMark[:E]
	clear(mark)
	for i := range n {
		topK(sc.router[i*E:(i+1)*E], sc.predIdx)
		for _, e := range sc.predIdx {
			mark[e] = true
		}
	}
	pred := s.pred[target][:0]
	if n == 1 {
		// One row (decode): in rank order, so the store can weigh each
		// prediction by its rank's measured precision.
		pred = append(pred, sc.predIdx...)
	} else {
		for e, ok := range mark {
			if ok {
				pred = append(pred, e)
			}
		}
	}
	s.pred[target] = pred
	m.Experts.Prefetch(target, pred)
	return nil
}

// moe routes the n rows of sc.h, runs the selected experts through the
// Source, combines them in fixed top-k order and adds the result to sc.x.
func (s *State) moe(ctx context.Context, li, n int) error {
	m := s.m
	sc := &s.sc
	H, E, K := m.Hidden, m.ExpertCount, m.ExpertsUsed
	if err := s.route(li, sc.h, n); err != nil {
		return err
	}
	for e := range E {
		sc.assign[e] = sc.assign[e][:0]
	}
	s.forRows(rowTopK, n, E)
	n = s.verifyCut(li, n)
	for i := range n {
		idx, w := sc.topk[i*K:(i+1)*K], sc.topw[i*K:(i+1)*K]
		for j, e := range idx {
			sc.assign[e] = append(sc.assign[e], int32(i*K+j))
		}
		if s.OnRoute != nil {
			s.OnRoute(s.pos+i, li, idx, w)
		}
	}
	// Each expert writes its rows to its own run of eout (no scatter);
	// eloc says where the combine finds (token, slot).
	sc.union = sc.union[:0]
	base := int32(0)
	for e := range E {
		if len(sc.assign[e]) > 0 {
			sc.union = append(sc.union, e)
			sc.ebase[e] = base
			for j, r := range sc.assign[e] {
				sc.eloc[r] = base + int32(j)
			}
			base += int32(len(sc.assign[e]))
		}
	}
	sc.layerIdx = li
	sc.layerExperts = sc.union
	sc.rows.Set(sc.h[:n*H], n, H)
	if ran, err := s.expertsParallel(ctx, li, n, sc.shared); err != nil {
		return fmt.Errorf("model: blk.%d experts: %w", li, err)
	} else if !ran {
		if err := m.Experts.Use(ctx, li, sc.union, sc.layerFn); err != nil {
			return fmt.Errorf("model: blk.%d experts: %w", li, err)
		}
	}
	// Combine in the fixed top-k order, whatever order experts ran in.
	s.forRows(rowCombine, n, K*H)
	return nil
}

// runExpert computes expert sc.layerExperts[i] of layer sc.layerIdx for
// every (token, slot) routed to it into its run of sc.eout (sc.ebase).
func (s *State) runExpert(i int, w moe.Weights) error {
	m := s.m
	sc := &s.sc
	li := sc.layerIdx
	e := sc.layerExperts[i]
	sh := &m.Layers[li].Shape
	H, F, K := m.Hidden, m.ExpertFFN, m.ExpertsUsed
	rows := sc.assign[e]
	cnt := len(rows)
	gate, up, down := w.Matrices(sh)
	sc.sel = grow(sc.sel, cnt)
	for j, r := range rows {
		sc.sel[j] = r / int32(K)
	}
	sc.mmDst[0], sc.mmDst[1] = sc.eg[:cnt*F], sc.eu[:cnt*F]
	sc.mmM[0], sc.mmM[1] = gate, up
	if err := tensor.MatMulMultiRows(m.pool, sc.mmDst[:2], sc.mmM[:2], &sc.rows, sc.sel); err != nil {
		return fmt.Errorf("expert %d gate/up: %w", e, err)
	}
	g, u := sc.eg[:cnt*F], sc.eu[:cnt*F]
	tensor.SiLUMul(g, u)
	b := int(sc.ebase[e])
	if err := m.matmul(sc.eout[b*H:(b+cnt)*H], &down, g, cnt); err != nil {
		return fmt.Errorf("expert %d down: %w", e, err)
	}
	return nil
}

// init finishes a bound model: thread pool and RoPE table.
func (m *Model) init(opts Options) {
	m.threads = max(opts.Threads, 1)
	m.parMin = parMinWork
	m.pool = tensor.NewPool(m.threads)
	m.closers = append(m.closers, func() error { m.pool.Close(); return nil })
	m.rope = newRope(m.RopeBase, m.RopeDim)
}
