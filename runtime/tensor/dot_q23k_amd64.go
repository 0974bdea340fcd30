//go:build amd64 && !purego

package tensor

// q2kVecs1AVX2 sets dst[r] to the product of Q2_K row r (rows consecutive
// rows of nb super-blocks at w) with the Q8_K vector y, bit-identical to
// dotQ2KQ8KGeneric (dot_q23k_amd64.s). It reads y.qs and y.bsums.
//
//go:noescape
func q2kVecs1AVX2(w *byte, rows int, y *blockQ8K, nb int, dst *float32)

// q3kVecs1AVX2 is q2kVecs1AVX2 for Q3_K rows, bit-identical to
// dotQ3KQ8KGeneric. It reads y.lqs, so permuteQ8K must be set.
//
//go:noescape
func q3kVecs1AVX2(w *byte, rows int, y *blockQ8K, nb int, dst *float32)

// q23kAsm returns the Q2_K and Q3_K decode kernels for asmKernels.
func q23kAsm() (q2, q3 *kernel) {
	q2 = &kernel{act: actQ8K, impl: "avx2-asm", exact: true, q8k: dotQ2KQ8KAsm, q8kN: dotQ2KQ8KVecsAsm, single: true}
	q3 = &kernel{act: actQ8K, impl: "avx2-asm", exact: true, q8k: dotQ3KQ8KAsm, q8kN: dotQ3KQ8KVecsAsm, single: true}
	return q2, q3
}

func dotQ2KQ8KAsm(w []byte, y []blockQ8K) float32 {
	if len(y) == 0 {
		return 0
	}
	w = w[:84*len(y)]
	var r float32
	q2kVecs1AVX2(&w[0], 1, &y[0], len(y), &r)
	return r
}

func dotQ3KQ8KAsm(w []byte, y []blockQ8K) float32 {
	if len(y) == 0 {
		return 0
	}
	w = w[:110*len(y)]
	var r float32
	q3kVecs1AVX2(&w[0], 1, &y[0], len(y), &r)
	return r
}

// dotQ2KQ8KRowsAsm is the q8kN form of the Q2_K kernel: rows consecutive
// rows dotted with each of nv vectors in turn (the decode kernel per
// vector; there is no shared-decode batched Q2_K kernel yet).
func dotQ2KQ8KRowsAsm(w []byte, rows int, y []blockQ8K, nv int, dst []float32, stride int) {
	vecs1Rows(q2kVecs1AVX2, 84, w, rows, y, nv, dst, stride)
}

// dotQ3KQ8KRowsAsm is dotQ2KQ8KRowsAsm for Q3_K.
func dotQ3KQ8KRowsAsm(w []byte, rows int, y []blockQ8K, nv int, dst []float32, stride int) {
	vecs1Rows(q3kVecs1AVX2, 110, w, rows, y, nv, dst, stride)
}

// vecs1Rows runs a decode kernel (bs bytes per super-block) for each of nv
// vectors of len(y)/nv blocks: dst[r+v*stride] = row r · vector v.
func vecs1Rows(f func(*byte, int, *blockQ8K, int, *float32), bs int, w []byte, rows int, y []blockQ8K, nv int, dst []float32, stride int) {
	nb, work := batchBlocks(rows, nv, len(y), dst, stride)
	if !work {
		return
	}
	_ = w[bs*nb*rows-1]
	_ = dst[(nv-1)*stride+rows-1]
	for v := range nv {
		f(&w[0], rows, &y[v*nb], nb, &dst[v*stride])
	}
}

// q2kVecsNAVX2 is the batched Q2_K kernel (dot_q23kn_amd64.s): rows
// consecutive rows of nb super-blocks dotted with nv (1..8) vectors of nb
// blocks at y, dst[r+v·stride] = row r · vector v, each super-block
// unpacked once for all vectors; bit-identical to dotQ2KQ8KGeneric.
//
//go:noescape
func q2kVecsNAVX2(w *byte, rows int, y *blockQ8K, nb, nv int, dst *float32, stride int)

// dotQ2KQ8KVecsAsm is the batched Q2_K kernel (q8kN) for several vectors;
// a single vector (decode) runs q2kVecs1AVX2, whose loop keeps the
// weights in registers.
func dotQ2KQ8KVecsAsm(w []byte, rows int, y []blockQ8K, nv int, dst []float32, stride int) {
	if nv <= 1 || rows == 0 || len(y) < nv {
		dotQ2KQ8KRowsAsm(w, rows, y, nv, dst, stride)
		return
	}
	nb := len(y) / nv
	_ = w[84*nb*rows-1]
	_ = dst[(nv-1)*stride+rows-1]
	q2kVecsNAVX2(&w[0], rows, &y[0], nb, nv, &dst[0], stride)
}

// prevK23Kernels returns the kernel set with the previous batched Q2_K
// and Q3_K forms (the decode kernel once per vector), for benchmarks.
func prevK23Kernels() map[Type]*kernel {
	m := make(map[Type]*kernel, len(kernels))
	for t, k := range kernels {
		m[t] = k
	}
	q2, q3 := *kernels[Q2_K], *kernels[Q3_K]
	q2.q8kN, q3.q8kN = dotQ2KQ8KRowsAsm, dotQ3KQ8KRowsAsm
	m[Q2_K], m[Q3_K] = &q2, &q3
	return m
}

// q3kVecsNAVX2 is q2kVecsNAVX2 for Q3_K rows, bit-identical to
// dotQ3KQ8KGeneric. It reads y.lqs, so permuteQ8K must be set.
//
//go:noescape
func q3kVecsNAVX2(w *byte, rows int, y *blockQ8K, nb, nv int, dst *float32, stride int)

// dotQ3KQ8KVecsAsm is dotQ2KQ8KVecsAsm for Q3_K.
func dotQ3KQ8KVecsAsm(w []byte, rows int, y []blockQ8K, nv int, dst []float32, stride int) {
	if nv <= 1 || rows == 0 || len(y) < nv {
		dotQ3KQ8KRowsAsm(w, rows, y, nv, dst, stride)
		return
	}
	nb := len(y) / nv
	_ = w[110*nb*rows-1]
	_ = dst[(nv-1)*stride+rows-1]
	q3kVecsNAVX2(&w[0], rows, &y[0], nb, nv, &dst[0], stride)
}
