//go:build arm64 && !purego

package tensor

import "unsafe"

//go:generate python3 gen_neon_k23.py

// q2kRowNEON is the whole Q2_K × Q8_K row dot product (nb blocks) in NEON
// assembly (dot_k23_arm64.s), identical to dotQ2KQ8KGeneric.
//
//go:noescape
func q2kRowNEON(w *byte, y *blockQ8K, nb int) float32

// q3kRowNEON is q2kRowNEON for Q3_K, identical to dotQ3KQ8KGeneric.
//
//go:noescape
func q3kRowNEON(w *byte, y *blockQ8K, nb int) float32

func dotQ2KQ8KNEON(w []byte, y []blockQ8K) float32 {
	if len(y) == 0 {
		return 0
	}
	w = w[:84*len(y)]
	return q2kRowNEON(&w[0], &y[0], len(y))
}

func dotQ3KQ8KNEON(w []byte, y []blockQ8K) float32 {
	if len(y) == 0 {
		return 0
	}
	w = w[:110*len(y)]
	return q3kRowNEON(&w[0], &y[0], len(y))
}

// q2kRowsNEON computes rows consecutive Q2_K rows (rowBytes apart, nb
// blocks each) against nv ≤ 8 Q8_K vectors (vector v at y + v·ystride
// bytes): dst[r + v·dstride] = row r · vector v, each super-block unpacked
// once for all vectors; identical to dotQ2KQ8KGeneric per vector.
//
//go:noescape
func q2kRowsNEON(w *byte, rowBytes, rows int, y *blockQ8K, nb, nv, ystride int, dst *float32, dstride int)

// q3kRowsNEON is q2kRowsNEON for Q3_K, identical to dotQ3KQ8KGeneric per
// vector.
//
//go:noescape
func q3kRowsNEON(w *byte, rowBytes, rows int, y *blockQ8K, nb, nv, ystride int, dst *float32, dstride int)

// dotQ2KQ8KRowsNEON is the batched Q2_K kernel (q8kN).
func dotQ2KQ8KRowsNEON(w []byte, rows int, y []blockQ8K, nv int, dst []float32, stride int) {
	dotK23RowsNEON(false, w, rows, y, nv, dst, stride)
}

// dotQ3KQ8KRowsNEON is the batched Q3_K kernel (q8kN).
func dotQ3KQ8KRowsNEON(w []byte, rows int, y []blockQ8K, nv int, dst []float32, stride int) {
	dotK23RowsNEON(true, w, rows, y, nv, dst, stride)
}

// dotK23RowsNEON checks the bounds of a batched Q2_K (q3 false) or Q3_K
// call and handles the empty cases (no rows or vectors; no blocks, where
// every product is zero).
func dotK23RowsNEON(q3 bool, w []byte, rows int, y []blockQ8K, nv int, dst []float32, stride int) {
	nb, work := batchBlocks(rows, nv, len(y), dst, stride)
	if !work {
		return
	}
	bs := 84
	if q3 {
		bs = 110
	}
	_ = w[bs*nb*rows-1]
	_ = dst[(nv-1)*stride+rows-1]
	ys := nb * int(unsafe.Sizeof(y[0]))
	if q3 {
		q3kRowsNEON(&w[0], bs*nb, rows, &y[0], nb, nv, ys, &dst[0], stride)
		return
	}
	q2kRowsNEON(&w[0], bs*nb, rows, &y[0], nb, nv, ys, &dst[0], stride)
}
