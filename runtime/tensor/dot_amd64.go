//go:build amd64 && !purego

package tensor

import (
	"encoding/binary"
	"math"
	"unsafe"

	"golang.org/x/sys/cpu"
)

// AVX2 (+F16C) Go assembly kernels (dot_amd64.s), used by every amd64
// build that is not purego, with or without GOEXPERIMENT=simd:
//   - F32/F16/BF16: the generic 8-lane float order, separate multiply and
//     add;
//   - Q8_0/Q4_0/Q5_0: exact integer block sums, float combination in Go;
//   - Q4_K/Q5_K/Q6_K: whole rows, interleaved VPMADDUBSW lanes and the
//     generic float combination in registers.
// All are bit-identical to the generic kernels (TestFastMatchesGeneric).

//go:noescape
func f32Lanes8(w *byte, x *float32, groups int, out *[8]float32)

//go:noescape
func f16Lanes8(w *byte, x *float32, groups int, out *[8]float32)

// f32RowsN and f16RowsN (N = 1..4 vectors, dot_float_amd64.s) set
// dst[r + v·dstride] = row r · vector v for rows consecutive F32/F16 rows
// (rowBytes apart, groups·8 values) and vectors at x + v·xstride bytes,
// each in the generic 8-lane order folded like reduce8.
//
//go:noescape
func f32Rows1(w *byte, rowBytes, rows, groups int, x *float32, xstride int, dst *float32, dstride int)

//
//go:noescape
func f32Rows2(w *byte, rowBytes, rows, groups int, x *float32, xstride int, dst *float32, dstride int)

//
//go:noescape
func f32Rows3(w *byte, rowBytes, rows, groups int, x *float32, xstride int, dst *float32, dstride int)

//
//go:noescape
func f32Rows4(w *byte, rowBytes, rows, groups int, x *float32, xstride int, dst *float32, dstride int)

//
//go:noescape
func f16Rows1(w *byte, rowBytes, rows, groups int, x *float32, xstride int, dst *float32, dstride int)

//
//go:noescape
func f16Rows2(w *byte, rowBytes, rows, groups int, x *float32, xstride int, dst *float32, dstride int)

//
//go:noescape
func f16Rows3(w *byte, rowBytes, rows, groups int, x *float32, xstride int, dst *float32, dstride int)

//
//go:noescape
func f16Rows4(w *byte, rowBytes, rows, groups int, x *float32, xstride int, dst *float32, dstride int)

// f16RoundAVX sets dst[i] = float32(half(src[i])) for groups·8 values
// (F16C, round to nearest even) and reports whether any src value was NaN
// (dot_float_amd64.s).
//
//go:noescape
func f16RoundAVX(dst, src *float32, groups int) bool

//go:noescape
func bf16Lanes8(w *byte, x *float32, groups int, out *[8]float32)

// q5_0SumsAVX2 sets out[i] to the integer dot product of Q5_0 weight block
// i (22-byte blocks at w) with activation block y[i], for nb blocks.
//
//go:noescape
func q5_0SumsAVX2(w *byte, y *blockQ8_0, nb int, out *int32)

// q4_0SumsAVX2 is q5_0SumsAVX2 for Q4_0 weight blocks (18 bytes).
//
//go:noescape
func q4_0SumsAVX2(w *byte, y *blockQ8_0, nb int, out *int32)

// q8_0RowAVX2 is the whole Q8_0 × Q8_0 row dot product (nb blocks).
//
//go:noescape
func q8_0RowAVX2(w *byte, y *blockQ8_0, nb int) float32

// q4kRowAVX2 is the whole Q4_K × Q8_K row dot product (nb blocks) in
// assembly, identical to dotQ4KQ8KGeneric.
//
//go:noescape
func q4kRowAVX2(w *byte, y *blockQ8K, nb int) float32

// q4kRow1AVX2 is the single-vector Q4_K kernel with lane-grouped
// activations (blockQ8K.lqs), identical to dotQ4KQ8KGeneric
// (dot_q4k_amd64.s).
//
//go:noescape
func q4kRow1AVX2(w *byte, y *blockQ8K, nb int) float32

// q4kRowsAVX2 computes rows consecutive Q4_K rows (rowBytes apart, nb
// blocks each) against nv ≤ 8 Q8_K vectors (vector v at y + v·ystride
// bytes): dst[r + v·dstride] = row r · vector v (dot_q4k_amd64.s).
//
//go:noescape
func q4kRowsAVX2(w *byte, rowBytes, rows int, y *blockQ8K, nb, nv, ystride int, dst *float32, dstride int)

// q8_0RowsAVX2 computes rows consecutive Q8_0 rows (rowBytes apart, nb
// blocks each) against nv ≤ 8 Q8_0 vectors (vector v's blocks at y +
// v·ystride bytes, their scales at yd + 4·v·nb bytes): dst[r + v·dstride] =
// row r · vector v (dot_q8_amd64.s). nv = 1 is the decode kernel.
//
//go:noescape
func q8_0RowsAVX2(w *byte, rowBytes, rows int, y *blockQ8_0, yd *float32, nb, nv, ystride int, dst *float32, dstride int)

// q8_0Vecs1AVX2 is q8_0RowsAVX2 for one vector (decode), with sumf in a
// register and the weights prefetched ahead; bit-identical to it.
//
//go:noescape
func q8_0Vecs1AVX2(w *byte, rows int, y *blockQ8_0, yd *float32, nb int, dst *float32)

// q6kRowsAVX2 is q4kRowsAVX2 for Q6_K rows (dot_q6k_amd64.s).
//
//go:noescape
func q6kRowsAVX2(w *byte, rowBytes, rows int, y *blockQ8K, nb, nv, ystride int, dst *float32, dstride int)

// q6kRow1AVX2 is the single-vector form of q6kRowsAVX2 (decode).
//
//go:noescape
func q6kRow1AVX2(w *byte, y *blockQ8K, nb int) float32

// q6kVecs1AVX2 is q6kRow1AVX2 over rows consecutive rows in one call, with
// the weights prefetched ahead (decode).
//
//go:noescape
func q6kVecs1AVX2(w *byte, rows int, y *blockQ8K, nb int, dst *float32)

// q5kRowAVX2 and q6kRowAVX2 are q4kRowAVX2 for Q5_K and Q6_K rows.
//
//go:noescape
func q5kRowAVX2(w *byte, y *blockQ8K, nb int) float32

//go:noescape
func q6kRowAVX2(w *byte, y *blockQ8K, nb int) float32

func asmKernels() map[Type]*kernel {
	if !cpu.X86.HasAVX2 || !cpu.X86.HasF16C {
		return nil
	}
	m := map[Type]*kernel{
		F32:  {act: actF32, impl: "avx2-asm", exact: true, f32: dotF32Asm, f32N: dotF32RowsAsm},
		F16:  {act: actF16, impl: "avx2-asm", exact: true, f32: dotF16Asm, f32N: dotF16RowsAsm},
		BF16: {act: actBF16, impl: "avx2-asm", exact: true, f32: dotBF16Asm},
	}
	// These replace the archsimd ones in GOEXPERIMENT=simd builds too: they
	// are as fast (Q4_K) or faster (Q6_K 2.2×, Q8_0) and work in every build.
	permuteQ8K = true
	roundF16 = roundF16AVX
	m[Q4_K] = &kernel{act: actQ8K, impl: "avx2-asm", exact: true, q8k: dotQ4KQ8KLanesAsm, q8kN: dotQ4KQ8KVecsAsm, single: true}
	m[Q6_K] = &kernel{act: actQ8K, impl: "avx2-asm", exact: true, q8k: dotQ6KQ8KLanesAsm, q8kN: dotQ6KQ8KRowsAsm, single: true}
	m[Q8_0] = &kernel{act: actQ8_0, impl: "avx2-asm", exact: true, q80: dotQ8_0Q8_0RowAsm, q80N: dotQ8_0Q8_0RowsAsm, single: true}
	m[Q5_0] = &kernel{act: actQ8_0, impl: "avx2-asm", exact: true, q80: dotQ5_0Q8_0Asm}
	m[Q4_0] = &kernel{act: actQ8_0, impl: "avx2-asm", exact: true, q80: dotQ4_0Q8_0Asm}
	m[Q5_K] = &kernel{act: actQ8K, impl: "avx2-asm", exact: true, q8k: dotQ5KQ8KRowAsm}
	m[Q2_K], m[Q3_K] = q23kAsm()
	return m
}

// The float kernels call the assembly directly (not through a func value,
// which would make the lane array escape to the heap) for the whole groups
// of 8, then finish like the generic code: reduce8, then the rest in order.

func dotF32Asm(w []byte, x []float32) float32 {
	n := len(x)
	w = w[:4*n]
	g := n / 8
	var r float32
	if g > 0 {
		var s [8]float32
		f32Lanes8(&w[0], &x[0], g, &s)
		r = reduce8(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7])
	}
	for i := 8 * g; i < n; i++ {
		r += float32(math.Float32frombits(binary.LittleEndian.Uint32(w[4*i:])) * x[i])
	}
	return r
}

func dotF16Asm(w []byte, x []float32) float32 {
	n := len(x)
	w = w[:2*n]
	g := n / 8
	var r float32
	if g > 0 {
		var s [8]float32
		f16Lanes8(&w[0], &x[0], g, &s)
		r = reduce8(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7])
	}
	for i := 8 * g; i < n; i++ {
		r += float32(f16Table[binary.LittleEndian.Uint16(w[2*i:])] * x[i])
	}
	return r
}

func dotBF16Asm(w []byte, x []float32) float32 {
	n := len(x)
	w = w[:2*n]
	g := n / 8
	var r float32
	if g > 0 {
		var s [8]float32
		bf16Lanes8(&w[0], &x[0], g, &s)
		r = reduce8(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7])
	}
	for i := 8 * g; i < n; i++ {
		r += float32(BF16ToF32(binary.LittleEndian.Uint16(w[2*i:])) * x[i])
	}
	return r
}

func dotQ5_0Q8_0Asm(w []byte, y []blockQ8_0) float32 {
	w = w[:22*len(y)]
	var sumi [64]int32
	var sumf float32
	for base := 0; base < len(y); base += len(sumi) {
		nb := min(len(sumi), len(y)-base)
		q5_0SumsAVX2(&w[22*base], &y[base], nb, &sumi[0])
		for k := 0; k < nb; k++ {
			ib := base + k
			dx := f16Table[binary.LittleEndian.Uint16(w[22*ib:])]
			sumf += float32(float32(dx*y[ib].d) * float32(sumi[k]))
		}
	}
	return sumf
}

func dotQ4_0Q8_0Asm(w []byte, y []blockQ8_0) float32 {
	w = w[:18*len(y)]
	var sumi [64]int32
	var sumf float32
	for base := 0; base < len(y); base += len(sumi) {
		nb := min(len(sumi), len(y)-base)
		q4_0SumsAVX2(&w[18*base], &y[base], nb, &sumi[0])
		for k := 0; k < nb; k++ {
			ib := base + k
			dx := f16Table[binary.LittleEndian.Uint16(w[18*ib:])]
			sumf += float32(float32(float32(sumi[k])*dx) * y[ib].d)
		}
	}
	return sumf
}

func dotQ4KQ8KRowAsm(w []byte, y []blockQ8K) float32 {
	if len(y) == 0 {
		return 0
	}
	w = w[:144*len(y)]
	return q4kRowAVX2(&w[0], &y[0], len(y))
}

func dotQ5KQ8KRowAsm(w []byte, y []blockQ8K) float32 {
	if len(y) == 0 {
		return 0
	}
	w = w[:176*len(y)]
	return q5kRowAVX2(&w[0], &y[0], len(y))
}

func dotQ6KQ8KRowAsm(w []byte, y []blockQ8K) float32 {
	if len(y) == 0 {
		return 0
	}
	w = w[:210*len(y)]
	return q6kRowAVX2(&w[0], &y[0], len(y))
}

func dotQ8_0Q8_0RowAsm(w []byte, y []blockQ8_0) float32 {
	if len(y) == 0 {
		return 0
	}
	w = w[:34*len(y)]
	return q8_0RowAVX2(&w[0], &y[0], len(y))
}

// dotQ4KQ8KLanesAsm is the single-vector form of dotQ4KQ8KRowsAsm (decode).
func dotQ4KQ8KLanesAsm(w []byte, y []blockQ8K) float32 {
	if len(y) == 0 {
		return 0
	}
	w = w[:144*len(y)]
	return q4kRow1AVX2(&w[0], &y[0], len(y))
}

// dotQ4KQ8KRowsAsm is the batched Q4_K kernel: rows consecutive rows of
// w, each decoded once per super-block for all nv ≤ batchVectors vectors.
func dotQ4KQ8KRowsAsm(w []byte, rows int, y []blockQ8K, nv int, dst []float32, stride int) {
	nb, work := batchBlocks(rows, nv, len(y), dst, stride)
	if !work {
		return
	}
	_ = w[144*nb*rows-1]
	_ = dst[(nv-1)*stride+rows-1]
	q4kRowsAVX2(&w[0], 144*nb, rows, &y[0], nb, nv, nb*int(unsafe.Sizeof(y[0])), &dst[0], stride)
}

// dotQ6KQ8KLanesAsm is the single-vector form of dotQ6KQ8KRowsAsm.
func dotQ6KQ8KLanesAsm(w []byte, y []blockQ8K) float32 {
	if len(y) == 0 {
		return 0
	}
	w = w[:210*len(y)]
	return q6kRow1AVX2(&w[0], &y[0], len(y))
}

// dotQ6KQ8KRowsAsm is the batched Q6_K kernel: rows consecutive rows of
// w, each super-block assembled once for all nv ≤ batchVectors vectors.
func dotQ6KQ8KRowsAsm(w []byte, rows int, y []blockQ8K, nv int, dst []float32, stride int) {
	nb, work := batchBlocks(rows, nv, len(y), dst, stride)
	if !work {
		return
	}
	_ = w[210*nb*rows-1]
	_ = dst[(nv-1)*stride+rows-1]
	if nv == 1 {
		q6kVecs1AVX2(&w[0], rows, &y[0], nb, &dst[0])
		return
	}
	q6kRowsAVX2(&w[0], 210*nb, rows, &y[0], nb, nv, nb*int(unsafe.Sizeof(y[0])), &dst[0], stride)
}

// dotQ8_0Q8_0RowsAsm is the batched Q8_0 kernel (q80N): rows consecutive
// rows of w, each block prepared once for all nv ≤ batchVectors vectors.
func dotQ8_0Q8_0RowsAsm(w []byte, rows int, y []blockQ8_0, yd []float32, nv int, dst []float32, stride int) {
	nb, work := batchBlocks(rows, nv, len(y), dst, stride)
	if !work {
		return
	}
	_ = w[34*nb*rows-1]
	_ = yd[nv*nb-1]
	_ = dst[(nv-1)*stride+rows-1]
	if nv == 1 {
		q8_0Vecs1AVX2(&w[0], rows, &y[0], &yd[0], nb, &dst[0])
		return
	}
	q8_0RowsAVX2(&w[0], 34*nb, rows, &y[0], &yd[0], nb, nv, nb*int(unsafe.Sizeof(y[0])), &dst[0], stride)
}

// roundF16AVX is the F16C form of the activation rounding to F16: identical
// to F16ToF32(F32ToF16(x)) (NaN inputs take the scalar path, which
// canonicalises them).
func roundF16AVX(dst, src []float32) {
	g := len(src) / 8
	if g > 0 && f16RoundAVX(&dst[0], &src[0], g) {
		g = 0
	}
	for i := 8 * g; i < len(src); i++ {
		dst[i] = f16Table[F32ToF16(src[i])]
	}
}

// rowKernels returns the kernel set without batched forms, and with the
// previous per-vector Q4_K row kernel (benchmarks compare the two).
func rowKernels() map[Type]*kernel {
	m := make(map[Type]*kernel, len(kernels))
	for t, k := range kernels {
		c := *k
		c.q8kN, c.q80N, c.f32N, c.single = nil, nil, nil, false
		m[t] = &c
	}
	m[Q4_K] = &kernel{act: actQ8K, impl: "avx2-asm-row", exact: true, q8k: dotQ4KQ8KRowAsm}
	m[Q6_K] = &kernel{act: actQ8K, impl: "avx2-asm-row", exact: true, q8k: dotQ6KQ8KRowAsm}
	return m
}

// floatRows is the batched F32/F16 kernel (f32N): rows rows of w
// (rb bytes apart) against nv ≤ batchVectors vectors of len(x)/nv values,
// up to four vectors per assembly call sharing each weight load. Rows whose
// length is not a multiple of 8 use the single-vector kernel, which adds
// the tail in order.
func floatRows(fns *[4]func(*byte, int, int, int, *float32, int, *float32, int), one func([]byte, []float32) float32,
	w []byte, rb, rows int, x []float32, nv int, dst []float32, stride int) {
	n := len(x) / nv
	if rows == 0 || nv == 0 {
		return
	}
	if n == 0 || n%8 != 0 {
		for r := range rows {
			for v := range nv {
				dst[r+v*stride] = one(w[r*rb:(r+1)*rb], x[v*n:(v+1)*n])
			}
		}
		return
	}
	_ = w[rb*(rows-1)+rb-1]
	_ = dst[(nv-1)*stride+rows-1]
	for v := 0; v < nv; v += 4 {
		c := min(4, nv-v)
		fns[c-1](&w[0], rb, rows, n/8, &x[v*n], 4*n, &dst[v*stride], stride)
	}
}

var (
	f32RowFns = [4]func(*byte, int, int, int, *float32, int, *float32, int){f32Rows1, f32Rows2, f32Rows3, f32Rows4}
	f16RowFns = [4]func(*byte, int, int, int, *float32, int, *float32, int){f16Rows1, f16Rows2, f16Rows3, f16Rows4}
)

func dotF32RowsAsm(w []byte, rb, rows int, x []float32, nv int, dst []float32, stride int) {
	floatRows(&f32RowFns, dotF32Asm, w, rb, rows, x, nv, dst, stride)
}

func dotF16RowsAsm(w []byte, rb, rows int, x []float32, nv int, dst []float32, stride int) {
	floatRows(&f16RowFns, dotF16Asm, w, rb, rows, x, nv, dst, stride)
}
