package tensor

// DotRows sets dst[v*dstride+r] = Dot(x[v*cols:(v+1)*cols],
// w[r*stride:r*stride+cols]) for r < rows and v < nv: nv vectors against
// the rows of a strided float32 matrix, each row loaded once for all of
// them (attention scores: the queries of a GQA group against the cached
// keys of their KV head). Every result is bit-identical to Dot. It panics
// if a slice is too short, as Dot does on a length mismatch.
func DotRows(dst []float32, dstride int, w []float32, stride, rows, cols int, x []float32, nv int) {
	if rows <= 0 || nv <= 0 || cols <= 0 {
		return
	}
	if len(w) < (rows-1)*stride+cols || len(x) < nv*cols || len(dst) < (nv-1)*dstride+rows || stride < cols || dstride < rows {
		panic("tensor: DotRows slices too short for the given shape")
	}
	if dotRowsF32 != nil && cols%8 == 0 && dotRowsF32(dst, dstride, w, stride, rows, cols, x, nv) {
		return
	}
	for v := range nv {
		xv := x[v*cols : (v+1)*cols]
		for r := range rows {
			dst[v*dstride+r] = dotF32F32(xv, w[r*stride:r*stride+cols])
		}
	}
}

// dotRowsF32, if set, is an assembly DotRows for cols a multiple of 8; it
// reports false when it cannot serve the call.
var dotRowsF32 func(dst []float32, dstride int, w []float32, stride, rows, cols int, x []float32, nv int) bool

// AxpyRows adds Σ_j a[v*astride+j]·w[j*stride:j*stride+cols] to
// y[v*cols:(v+1)*cols] for v < nv, j ascending (attention's weighted sum of
// the cached values for the heads of a GQA group): each element's sum is
// Axpy's, j by j in order, so the result is bit-identical to calling Axpy
// per row and vector.
func AxpyRows(y []float32, a []float32, astride int, w []float32, stride, rows, cols, nv int) {
	if rows <= 0 || nv <= 0 || cols <= 0 {
		return
	}
	if len(w) < (rows-1)*stride+cols || len(y) < nv*cols || len(a) < (nv-1)*astride+rows || stride < cols || astride < rows {
		panic("tensor: AxpyRows slices too short for the given shape")
	}
	if axpyRowsF32 != nil && cols%8 == 0 && axpyRowsF32(y, a, astride, w, stride, rows, cols, nv) {
		return
	}
	for j := range rows {
		wj := w[j*stride : j*stride+cols]
		for v := range nv {
			Axpy(a[v*astride+j], wj, y[v*cols:(v+1)*cols])
		}
	}
}

// axpyRowsF32, if set, is an assembly AxpyRows for cols a multiple of 8.
var axpyRowsF32 func(y []float32, a []float32, astride int, w []float32, stride, rows, cols, nv int) bool
