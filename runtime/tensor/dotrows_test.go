package tensor

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestDotRowsMatchesDot checks DotRows and AxpyRows against Dot and Axpy
// applied row by row, bit for bit, for strided rows, 1-9 vectors and
// lengths that are and are not multiples of 8 (attention uses both).
func TestDotRowsMatchesDot(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, cols := range []int{8, 24, 40, 64, 72, 128, 13} {
		for _, nv := range []int{1, 2, 3, 4, 5, 8, 9} {
			for _, rows := range []int{1, 3, 17} {
				stride := cols + 8*r.IntN(3) + r.IntN(2)
				w := randVec(r, (rows-1)*stride+cols, 1)
				x := randVec(r, nv*cols, 2)
				dstride := rows + r.IntN(3)
				got := make([]float32, (nv-1)*dstride+rows)
				DotRows(got, dstride, w, stride, rows, cols, x, nv)
				for v := range nv {
					for j := range rows {
						want := Dot(x[v*cols:(v+1)*cols], w[j*stride:j*stride+cols])
						if g := got[v*dstride+j]; math.Float32bits(g) != math.Float32bits(want) {
							t.Fatalf("DotRows cols=%d nv=%d rows=%d: vector %d row %d = %v, Dot %v", cols, nv, rows, v, j, g, want)
						}
					}
				}
				y := randVec(r, nv*cols, 1)
				want := append([]float32(nil), y...)
				for j := range rows {
					for v := range nv {
						Axpy(got[v*dstride+j], w[j*stride:j*stride+cols], want[v*cols:(v+1)*cols])
					}
				}
				AxpyRows(y, got, dstride, w, stride, rows, cols, nv)
				for i := range y {
					if math.Float32bits(y[i]) != math.Float32bits(want[i]) {
						t.Fatalf("AxpyRows cols=%d nv=%d rows=%d: element %d = %v, Axpy %v", cols, nv, rows, i, y[i], want[i])
					}
				}
			}
		}
	}
}
