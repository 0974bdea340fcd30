package model

import (
	"github.com/lesfarm/lesfarm/runtime/tensor"
)

// The per-row steps of a forward pass (rms norms, the router's softmax and
// top-k, the MoE combine, the shared expert's gate, the gated attention's
// per-head norms, RoPE and output gates) read and write only their own
// row, so with several threads a batch splits them by row (token) on the
// pool. Each row runs the serial loop's operations in its order, so the
// results are bit-identical whatever the split. Small batches (decode)
// stay inline: a dispatch costs a few microseconds.

// rowOp names a per-row step (see rowPar.run).
type rowOp uint8

const (
	rowNorm     rowOp = iota // dst[i] = rms(src[i]) ⊙ w
	rowSoftmax               // softmax of router row i
	rowTopK                  // top-k of router row i, weights normalised
	rowCombine               // x[i] += Σ_j w[i][j]·eout[loc[i][j]]
	rowShared                // x[i] += sigmoid(ShGateInp·h[i])·d[i]
	rowAttnPre               // q, k head norms and RoPE of token i, cached
	rowAttnGate              // att[i] ⊙= sigmoid(gate[i])
)

// parMinWork is the least work, in values (a value under an exp counting
// expWork), worth a pool dispatch for a per-row or per-channel step; the
// Model's parMin defaults to it (tests lower it to cover the splits on tiny
// models).
const (
	parMinWork = 1 << 14
	expWork    = 8
)

// rowPar is one per-row step's arguments: the State's calling goroutine
// sets them, the pool's threads only read them.
type rowPar struct {
	s       *State
	op      rowOp
	li      int
	dst, x  []float32
	w       []float32
	d       []float32 // rowShared: the shared expert's output
	gateInp []float32 // rowShared: the shared expert's gate row
	L       *Layer    // rowAttnPre
	fn      func(lo, hi int)
}

// forRows runs step op over rows [0, n), each row work values of work
// (see parMinWork), on the pool when there are several threads, several
// rows and enough work, inline otherwise. The caller has set the step's
// other arguments in s.rowPar(); forRows clears them.
func (s *State) forRows(op rowOp, n, work int) {
	rp := s.rowPar()
	rp.op = op
	m := s.m
	if m.threads < 2 || n < 2 || n*work < m.parMin {
		rp.run(0, n)
	} else {
		m.pool.For(n, rp.fn)
	}
	*rp = rowPar{s: s, fn: rp.fn}
}

// rowPar returns the State's step arguments, allocated once.
func (s *State) rowPar() *rowPar {
	if s.sc.rp == nil {
		rp := &rowPar{s: s}
		rp.fn = rp.run // bound once (a method value allocates)
		s.sc.rp = rp
	}
	return s.sc.rp
}

// normRows writes rms(x[i]) ⊙ w into dst[i] for the n rows of width
// len(w) (dst may alias x).
func (s *State) normRows(dst, x, w []float32, n int) {
	rp := s.rowPar()
	rp.dst, rp.x, rp.w = dst, x, w
	s.forRows(rowNorm, n, 2*len(w))
}

// run computes rows [lo, hi) of the step.
func (rp *rowPar) run(lo, hi int) {
	s := rp.s
	m := s.m
	sc := &s.sc
	H, E, K := m.Hidden, m.ExpertCount, m.ExpertsUsed
	switch rp.op {
	case rowNorm:
		W := len(rp.w)
		for i := lo; i < hi; i++ {
			rmsNorm(rp.dst[i*W:(i+1)*W], rp.x[i*W:(i+1)*W], rp.w, m.Eps)
		}
	case rowSoftmax:
		for i := lo; i < hi; i++ {
			softmax(sc.router[i*E : (i+1)*E])
		}
	case rowTopK:
		for i := lo; i < hi; i++ {
			topKWeights(sc.router[i*E:(i+1)*E], sc.topk[i*K:(i+1)*K], sc.topw[i*K:(i+1)*K])
		}
	case rowCombine:
		for i := lo; i < hi; i++ {
			s.combineRow(i, sc.cacc[i*H:(i+1)*H])
		}
	case rowShared:
		for i := lo; i < hi; i++ {
			gate := sigmoid(tensor.Dot(rp.gateInp, sc.h[i*H:(i+1)*H]))
			xi, di := sc.x[i*H:(i+1)*H], rp.d[i*H:(i+1)*H]
			// ggml's mul then add: the conversion rounds the product,
			// so the compiler cannot fuse a multiply-add (it does on
			// arm64, and on amd64 from GOAMD64=v3) and every target
			// gets the same bits.
			for j := range xi {
				xi[j] += float32(di[j] * gate)
			}
		}
	case rowAttnPre:
		for i := lo; i < hi; i++ {
			s.attnPreRow(rp.li, rp.L, rp.x, i)
		}
	case rowAttnGate:
		// sc.q is free once attention has read it: token i's row is the
		// exp scratch of its heads.
		qDim, D, Dv := m.Heads*m.HeadDim, m.HeadDim, m.ValueDim
		for i := lo; i < hi; i++ {
			for hd := range m.Heads {
				gate := rp.x[i*2*qDim+hd*2*D+D : i*2*qDim+(hd+1)*2*D]
				o := sc.att[(i*m.Heads+hd)*Dv : (i*m.Heads+hd+1)*Dv]
				sigmoidMulVec(o, gate, sc.q[i*qDim:(i+1)*qDim])
			}
		}
	}
}

// topKWeights writes the indices of the k = len(idx) largest router
// probabilities p into idx and their weights, normalised to sum 1 (the sum
// in float64, in rank order), into w.
func topKWeights(p []float32, idx []int, w []float32) {
	topK(p, idx)
	var sum float64
	for j, e := range idx {
		w[j] = p[e]
		sum += float64(p[e])
	}
	fs := float32(sum)
	for j := range w {
		w[j] /= fs
	}
}

// combineRow adds token i's expert outputs, weighted, in the fixed top-k
// order (whatever order the experts ran in), to sc.x, summing them in acc
// (Hidden floats) first: acc = 0 + w0·o0 + w1·o1 + ..., then x += acc,
// each step an element-wise tensor.AxpyRows (its AVX2 kernel on amd64,
// Axpy's loop elsewhere; both round o·w to float32, then add). Starting
// the sum from zero gives w0·o0 exactly, but for the sign of a zero
// product.
func (s *State) combineRow(i int, acc []float32) {
	m := s.m
	sc := &s.sc
	H, K := m.Hidden, m.ExpertsUsed
	xi := sc.x[i*H : (i+1)*H]
	w := sc.topw[i*K : (i+1)*K]
	loc := sc.eloc[i*K : (i+1)*K]
	clear(acc)
	for j := range K {
		o := sc.eout[int(loc[j])*H : int(loc[j]+1)*H]
		tensor.AxpyRows(acc, w[j:j+1], 1, o, H, 1, H, 1)
	}
	tensor.AxpyRows(xi, one[:], 1, acc, H, 1, H, 1)
}

// one is the weight of combineRow's last step, x += 1·acc (exactly x +
// acc).
var one = [1]float32{1}
