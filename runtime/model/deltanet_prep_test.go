package model

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestConvBatchMatchesConvStep: the batched conv over any channel split
// gives convStep's outputs, window and checkpoint window token by token,
// bit for bit, for batches shorter and longer than the window.
func TestConvBatchMatchesConvStep(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 31))
	randv := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(r.NormFloat64())
		}
		return v
	}
	const C = 37
	for _, taps := range []int{1, 2, 4, 10} { // 10: more taps than convBatch keeps on its stack
		for _, n := range []int{1, 2, 3, 9} {
			for _, ckAt := range []int{-1, 0, n / 2, n - 1} {
				w, mix, win := randv(C*taps), randv(n*C), randv((taps-1)*C)
				// token by token
				ws, want := slices.Clone(win), make([]float32, n*C)
				wantCk := make([]float32, len(win))
				for tk := range n {
					if tk == ckAt {
						copy(wantCk, ws)
					}
					convStep(want[tk*C:(tk+1)*C], ws, mix[tk*C:(tk+1)*C], w, taps)
				}
				for _, split := range [][]int{{0, C}, {0, 5, 17, C}} {
					wb, got, gotCk := slices.Clone(win), make([]float32, n*C), make([]float32, len(win))
					for i := 0; i+1 < len(split); i++ {
						convBatch(got, wb, mix, w, gotCk, C, taps, n, ckAt, split[i], split[i+1])
					}
					for name, pair := range map[string][2][]float32{"out": {got, want}, "window": {wb, ws}} {
						for i := range pair[1] {
							if math.Float32bits(pair[0][i]) != math.Float32bits(pair[1][i]) {
								t.Fatalf("taps %d n %d split %v: %s[%d] %v != convStep's %v", taps, n, split, name, i, pair[0][i], pair[1][i])
							}
						}
					}
					if ckAt >= 0 && !slices.Equal(gotCk, wantCk) {
						t.Fatalf("taps %d n %d ckAt %d: checkpoint window differs", taps, n, ckAt)
					}
				}
			}
		}
	}
}
