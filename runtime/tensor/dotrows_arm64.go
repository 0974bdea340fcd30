//go:build arm64 && !purego

package tensor

// axpyRowNEON adds Σ_j a[j]·(row j of w) to the chunks·8 floats at y, j
// ascending, rows ≥ 1 rows wstride bytes apart (dotrows_arm64.s): the
// arm64 form of axpyRowAVX2, with the same roundings as Axpy.
//
//go:noescape
func axpyRowNEON(y *float32, a *float32, w *float32, wstride, rows, chunks int)

func init() {
	axpyRowsF32 = func(y []float32, a []float32, astride int, w []float32, stride, rows, cols, nv int) bool {
		for v := range nv {
			axpyRowNEON(&y[v*cols], &a[v*astride], &w[0], 4*stride, rows, cols/8)
		}
		return true
	}
}
