//go:build amd64 && !purego

package tensor

import "unsafe"

// q4kVecs1FrameAVX2 is the previous single-vector Q4_K kernel, which kept
// its float sums in the stack frame; the decode benchmarks compare it with
// q4kVecs1AVX2 (sums in registers) in the same run.
//
//go:noescape
func q4kVecs1FrameAVX2(w *byte, rows int, y *blockQ8K, nb, ystride int, dst *float32, dstride int)

// prevDecodeKernels returns the kernel set with the previous single-vector
// (decode) kernels of Q4_K, Q8_0 and Q6_K, and the generic (pure-Go) Q2_K
// and Q3_K ones the AVX2 kernels replaced, for side-by-side benchmarks.
func prevDecodeKernels() map[Type]*kernel {
	m := make(map[Type]*kernel, len(kernels))
	for t, k := range kernels {
		m[t] = k
	}
	q4 := *kernels[Q4_K]
	q4.q8kN = func(w []byte, rows int, y []blockQ8K, nv int, dst []float32, stride int) {
		if nv != 1 || rows == 0 || len(y) == 0 {
			dotQ4KQ8KVecsAsm(w, rows, y, nv, dst, stride)
			return
		}
		nb := len(y)
		_ = w[144*nb*rows-1]
		_ = dst[rows-1]
		q4kVecs1FrameAVX2(&w[0], rows, &y[0], nb, nb*int(unsafe.Sizeof(y[0])), &dst[0], stride)
	}
	m[Q4_K] = &q4
	q8 := *kernels[Q8_0]
	q8.q80N = func(w []byte, rows int, y []blockQ8_0, yd []float32, nv int, dst []float32, stride int) {
		nb := len(y) / max(nv, 1)
		if rows == 0 || nv == 0 || nb == 0 {
			dotQ8_0Q8_0RowsAsm(w, rows, y, yd, nv, dst, stride)
			return
		}
		_ = w[34*nb*rows-1]
		_ = yd[nv*nb-1]
		_ = dst[(nv-1)*stride+rows-1]
		q8_0RowsAVX2(&w[0], 34*nb, rows, &y[0], &yd[0], nb, nv, nb*int(unsafe.Sizeof(y[0])), &dst[0], stride)
	}
	m[Q8_0] = &q8
	q6 := *kernels[Q6_K]
	q6.single = false // q6kRow1AVX2 per row
	m[Q6_K] = &q6
	m[Q2_K], m[Q3_K] = genericKernels[Q2_K], genericKernels[Q3_K]
	return m
}
