package model

import (
	"math"
	"unsafe"

	"github.com/lesfarm/lesfarm/runtime/tensor"
)

// Gated DeltaNet (qwen35moe's linear-attention layers), one token at a
// time. Per v-head h, with k-head kh = h mod KHeads (llama.cpp's tiled
// order), the state S_h is HeadDim × HeadDim, rows indexed by key dim and
// columns by value dim:
//
//	S  = exp(g_h) · S
//	δ  = β_h · (v_h − Sᵀ k_kh)
//	S  = S + k_kh ⊗ δ
//	o_h = Sᵀ q_kh / sqrt(HeadDim)       (read out after the update)
//
// q and k are L2-normalised, β = sigmoid(b) and g = softplus(a + dt_bias)·A
// with A = −exp(A_log) < 0, so the decay exp(g) is in (0, 1].

// sigmoid returns 1 / (1 + exp(-x)).
func sigmoid(x float32) float32 {
	return 1 / (1 + float32(math.Exp(float64(-x))))
}

// softplus returns log(1 + exp(x)), or x above 20 as ggml does.
func softplus(x float32) float32 {
	if x > 20 {
		return x
	}
	return float32(math.Log(1 + float64(float32(math.Exp(float64(x))))))
}

// l2Norm scales x in place to x / max(‖x‖₂, eps) (ggml_l2_norm).
func l2Norm(x []float32, eps float32) {
	var sum float64
	for _, v := range x {
		sum += float64(float32(v * v))
	}
	scale := 1 / max(float32(math.Sqrt(sum)), eps)
	for i, v := range x {
		x[i] = v * scale
	}
}

// convStep runs the causal depthwise conv for one token: window holds the
// raw inputs of the previous taps-1 tokens (oldest first, channels
// contiguous), raw is the current token's input, w is channels × taps with
// tap taps-1 on the current token. It writes silu(conv) into out and shifts
// raw into window.
func convStep(out, window, raw, w []float32, taps int) {
	C := len(raw)
	prev := taps - 1
	for j := range C {
		wj := w[j*taps : (j+1)*taps]
		var sum float32
		for t := range prev {
			sum += float32(window[t*C+j] * wj[t])
		}
		sum += float32(raw[j] * wj[prev])
		out[j] = sum
	}
	siluVec(out[:C])
	if prev > 0 {
		copy(window, window[C:])
		copy(window[(prev-1)*C:], raw)
	}
}

// deltaUpdate applies one token's decay and delta-rule update to the
// state of one head, stored transposed: St[j*D+i] = S[i][j] (row j is
// value dim j over the D key dims), so Sᵀk and Sᵀq are matrix-vector
// products with St that run on the F32 matrix kernels. k and v are D
// values; when q is non-nil it also reads out o = Sᵀq after the update (q
// already scaled by 1/sqrt(D)). acc is D floats of scratch. Forward and
// rollback replay both come here or to deltaStep, so a replayed state is
// bit-identical to the one computed in the pass.
func deltaUpdate(St, k, v, q, o, acc []float32, decay, beta float32) {
	D := len(k)
	M := tensor.Matrix{Type: tensor.F32, Rows: D, Cols: D, Data: f32Bytes(St[:D*D])}
	if err := tensor.MatVec(nil, acc[:D], M, k); err != nil {
		panic(err) // shapes are fixed at load; cannot happen
	}
	deltaStep(St, k, v, q, o, acc, decay, beta, nil, nil)
}

// deltaStep is deltaUpdate after its first product: acc holds Sᵀk of the
// undecayed state on entry (deltaUpdate's MatVec, or the previous token's
// kn). The decay is folded in: exp(g)·Sᵀk = (exp(g)·S)ᵀk, and one pass
// over the state (tensor.DecayAddDot) writes exp(g)·S + k⊗δ, reads out
// o = Sᵀq and, when kn is not nil, kn = Sᵀk2 of the updated state (the
// next token's first product), with the F32 kernels' bits: the same
// results as separate passes, with one read of the state instead of three.
func deltaStep(St, k, v, q, o, acc []float32, decay, beta float32, k2, kn []float32) {
	D := len(k)
	acc, v = acc[:D], v[:D]
	for j := range acc {
		acc[j] = float32(beta * (v[j] - float32(decay*acc[j]))) // δ
	}
	if q == nil {
		for j := range D {
			decayAdd(St[j*D:(j+1)*D], decay, acc[j], k)
		}
		return
	}
	if err := tensor.DecayAddDot(St[:D*D], decay, acc, k, q, o[:D], k2, kn); err != nil {
		panic(err) // shapes are fixed at load; cannot happen
	}
}

// f32Bytes views x as its little-endian bytes (the F32 tensor layout on
// every target: amd64 and arm64).
func f32Bytes(x []float32) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(x))), 4*len(x))
}

// decayAdd sets row = d·row + a·x, unrolled by four.
func decayAdd(row []float32, d, a float32, x []float32) {
	n := len(row)
	x = x[:n]
	j := 0
	for ; j+4 <= n; j += 4 {
		rr := row[j : j+4 : j+4]
		xx := x[j : j+4 : j+4]
		rr[0] = float32(d*rr[0]) + float32(a*xx[0])
		rr[1] = float32(d*rr[1]) + float32(a*xx[1])
		rr[2] = float32(d*rr[2]) + float32(a*xx[2])
		rr[3] = float32(d*rr[3]) + float32(a*xx[3])
	}
	for ; j < n; j++ {
		row[j] = float32(d*row[j]) + float32(a*x[j])
	}
}
