//go:build arm64 && !purego

package tensor

import (
	"encoding/binary"
	"math"
	"unsafe"
)

//go:generate python3 gen_neon.py

// NEON kernels (Go assembly in dot_arm64.s). Phones are arm64, and Go has
// no vector intrinsics there, so the integer lane sums of the hot K-quant
// kernels are computed in assembly: SMULL/SMLAL widen int8 products to
// int16 in exactly the generic mod-8 lane order (lane = element index mod
// 8; each 8-byte half-register is one group of 8 consecutive elements), then
// SMLAL by element applies the sub-block scale into int32 lanes. The float
// combination stays in Go, identical to the generic code, so results are
// bit-identical (tested under qemu-aarch64).

// q4kRowNEON is the whole Q4_K × Q8_K row dot product (nb blocks) in
// assembly, identical to dotQ4KQ8KGeneric.
//
//go:noescape
func q4kRowNEON(w *byte, y *blockQ8K, nb int) float32

// q4kRowsNEON computes rows consecutive Q4_K rows (rowBytes apart, nb
// blocks each) against nv ≤ 8 Q8_K vectors (vector v at y + v·ystride
// bytes): dst[r + v·dstride] = row r · vector v, each row's super-blocks
// unpacked once for all vectors; identical to dotQ4KQ8KGeneric per vector.
//
//go:noescape
func q4kRowsNEON(w *byte, rowBytes, rows int, y *blockQ8K, nb, nv, ystride int, dst *float32, dstride int)

// q6kRowNEON is the whole Q6_K × Q8_K row dot product (nb blocks) in
// assembly, identical to dotQ6KQ8KGeneric.
//
//go:noescape
func q6kRowNEON(w *byte, y *blockQ8K, nb int) float32

// q8_0RowsNEON sets dst[r] to the Q8_0 × Q8_0 dot product of row r of rows
// consecutive rows of nb blocks (34·nb bytes each) with y, in
// dotQ8_0Q8_0Generic's order (integer block sums, then sumf +=
// float32(sumi)·(dx·dy) block after block), sumf in a register.
//
//go:noescape
func q8_0RowsNEON(w *byte, rows int, y *blockQ8_0, nb int, dst *float32)

// f32Lanes and f16Lanes compute the 8 float32 lane sums of the generic
// F32/F16 dot over groups×8 values (w holds float32 or half values).
//
//go:noescape
func f32Lanes(w *byte, x *float32, groups int, out *[8]float32)

//go:noescape
func f16Lanes(w *byte, x *float32, groups int, out *[8]float32)

func simdKernels() map[Type]*kernel {
	return map[Type]*kernel{
		Q4_K: {act: actQ8K, impl: "neon", exact: true, q8k: dotQ4KQ8KRowNEON, q8kN: dotQ4KQ8KRowsNEON},
		Q6_K: {act: actQ8K, impl: "neon", exact: true, q8k: dotQ6KQ8KNEON},
		Q2_K: {act: actQ8K, impl: "neon", exact: true, q8k: dotQ2KQ8KNEON, q8kN: dotQ2KQ8KRowsNEON},
		Q3_K: {act: actQ8K, impl: "neon", exact: true, q8k: dotQ3KQ8KNEON, q8kN: dotQ3KQ8KRowsNEON},
		Q8_0: {act: actQ8_0, impl: "neon", exact: true, q80: dotQ8_0Q8_0NEON, q80N: dotQ8_0Q8_0RowsNEON, single: true},
		F32:  {act: actF32, impl: "neon", exact: true, f32: dotF32NEON},
		F16:  {act: actF16, impl: "neon", exact: true, f32: dotF16NEON},
	}
}

func dotF32NEON(w []byte, x []float32) float32 {
	n := len(x)
	w = w[:4*n]
	g := n / 8
	if g == 0 {
		return dotF32Fast(w, x)
	}
	var s [8]float32
	f32Lanes(&w[0], &x[0], g, &s)
	r := reduce8(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7])
	for i := 8 * g; i < n; i++ {
		r += float32(f32At(w[4*i:]) * x[i])
	}
	return r
}

func dotF16NEON(w []byte, x []float32) float32 {
	n := len(x)
	w = w[:2*n]
	g := n / 8
	if g == 0 {
		return dotF16Fast(w, x)
	}
	var s [8]float32
	f16Lanes(&w[0], &x[0], g, &s)
	r := reduce8(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7])
	for i := 8 * g; i < n; i++ {
		r += float32(f16Table[binary.LittleEndian.Uint16(w[2*i:])] * x[i])
	}
	return r
}

func dotQ8_0Q8_0NEON(w []byte, y []blockQ8_0) float32 {
	if len(y) == 0 {
		return 0
	}
	w = w[:34*len(y)]
	var r float32
	q8_0RowsNEON(&w[0], 1, &y[0], len(y), &r)
	return r
}

// dotQ8_0Q8_0RowsNEON is the q80N form: one call streams all rows for a
// single vector (decode); for several vectors each row is dotted with every
// vector while it is in L1, as partRows does.
func dotQ8_0Q8_0RowsNEON(w []byte, rows int, y []blockQ8_0, _ []float32, nv int, dst []float32, stride int) {
	nb, work := batchBlocks(rows, nv, len(y), dst, stride)
	if !work {
		return
	}
	_ = w[34*nb*rows-1]
	_ = dst[(nv-1)*stride+rows-1]
	if nv == 1 {
		q8_0RowsNEON(&w[0], rows, &y[0], nb, &dst[0])
		return
	}
	for r := range rows {
		for v := range nv {
			q8_0RowsNEON(&w[34*nb*r], 1, &y[v*nb], nb, &dst[r+v*stride])
		}
	}
}

func dotQ6KQ8KNEON(w []byte, y []blockQ8K) float32 {
	if len(y) == 0 {
		return 0
	}
	w = w[:210*len(y)]
	return q6kRowNEON(&w[0], &y[0], len(y))
}

func f32At(b []byte) float32 { return math.Float32frombits(binary.LittleEndian.Uint32(b)) }

func dotQ4KQ8KRowNEON(w []byte, y []blockQ8K) float32 {
	if len(y) == 0 {
		return 0
	}
	w = w[:144*len(y)]
	return q4kRowNEON(&w[0], &y[0], len(y))
}

// dotQ4KQ8KRowsNEON is the batched Q4_K kernel (q8kN).
func dotQ4KQ8KRowsNEON(w []byte, rows int, y []blockQ8K, nv int, dst []float32, stride int) {
	nb, work := batchBlocks(rows, nv, len(y), dst, stride)
	if !work {
		return
	}
	_ = w[144*nb*rows-1]
	_ = dst[(nv-1)*stride+rows-1]
	q4kRowsNEON(&w[0], 144*nb, rows, &y[0], nb, nv, nb*int(unsafe.Sizeof(y[0])), &dst[0], stride)
}
