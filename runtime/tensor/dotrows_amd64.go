//go:build amd64 && !purego

package tensor

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

// axpyRowAVX2 adds Σ_j a[j]·(row j of w) to the chunks·8 floats at y, j
// ascending, rows ≥ 1 rows wstride bytes apart (dotrows_amd64.s).
//
//go:noescape
func axpyRowAVX2(y *float32, a *float32, w *float32, wstride, rows, chunks int)

func init() {
	if !cpu.X86.HasAVX2 {
		return
	}
	dotRowsF32 = func(dst []float32, dstride int, w []float32, stride, rows, cols int, x []float32, nv int) bool {
		wb := (*byte)(unsafe.Pointer(&w[0]))
		for v := 0; v < nv; v += 4 {
			c := min(4, nv-v)
			f32RowFns[c-1](wb, 4*stride, rows, cols/8, &x[v*cols], 4*cols, &dst[v*dstride], dstride)
		}
		return true
	}
	axpyRowsF32 = func(y []float32, a []float32, astride int, w []float32, stride, rows, cols, nv int) bool {
		for v := range nv {
			axpyRowAVX2(&y[v*cols], &a[v*astride], &w[0], 4*stride, rows, cols/8)
		}
		return true
	}
}
