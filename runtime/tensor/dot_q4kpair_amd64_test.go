//go:build amd64 && !purego

package tensor

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/lesfarm/lesfarm/runtime/internal/cputime"
)

// TestQ4KVecs1Pairs checks the decode product (one vector) of Q4_K
// matrices with the two-row AVX2 kernel (q4kVecs1x2AVX2) and with the
// one-row kernel alone, bit for bit against the generic kernel, for even
// and odd row counts (the odd last row takes the one-row kernel), one and
// many super-blocks, random weights and random bytes (every quant, scale
// and min pattern).
func TestQ4KVecs1Pairs(t *testing.T) {
	if kernels[Q4_K].impl != "avx2-asm" {
		t.Skip("no AVX2 kernels on this CPU")
	}
	defer func(on, z bool) { q4kPairs, q4kAVX512 = on, z }(q4kPairs, q4kAVX512)
	q4kAVX512 = false
	r := rand.New(rand.NewPCG(61, 62))
	for _, tc := range []struct{ rows, nb int }{
		{1, 1}, {2, 1}, {3, 2}, {4, 1}, {5, 8}, {8, 2}, {9, 16}, {64, 8}, {65, 2}, {2, 17},
	} {
		for _, m := range []Matrix{makeMatrix(t, r, Q4_K, tc.rows, tc.nb*QK_K), randomBytesMatrix(r, Q4_K, tc.rows, tc.nb*QK_K)} {
			x := randVec(r, tc.nb*QK_K, 3)
			x[1] = 0
			want := genericMatVec(t, m, x)
			for _, on := range []bool{true, false} {
				q4kPairs = on
				got := make([]float32, tc.rows)
				if err := MatMul(nil, got, m, x, 1); err != nil {
					t.Fatal(err)
				}
				for i := range tc.rows {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("rows %d, %d blocks, pairs %v: row %d %v != generic %v", tc.rows, tc.nb, on, i, got[i], want[i])
					}
				}
			}
		}
	}
}

// BenchmarkQ4KVecs1Pairs alternates the single-vector Q4_K product with
// the two-row kernel ("new", q4kPairs) and the one-row kernel ("prev")
// over qwen35moe's expert shapes (gate/up 512×2048, down 2048×512) and
// its DeltaNet qkv (8192×2048) and out (2048×4096) projections, 40
// rounds of 20 products each per iteration, weights in cache ("cached",
// the kernels' own speed) or streamed from 128 MiB of distinct matrices
// ("stream", as a MoE decode step reads them), and reports the median of
// the per-round CPU-time ratios prev/new (above 1: new is faster) and both
// rates in GFLOP per CPU-second.
//
//	go test ./runtime/tensor -run XXX -bench Q4KVecs1Pairs -benchtime 1x -count 3
func BenchmarkQ4KVecs1Pairs(b *testing.B) {
	defer func(on bool) { q4kPairs = on }(q4kPairs)
	for _, sh := range [][2]int{{512, 2048}, {2048, 512}, {8192, 2048}, {2048, 4096}} {
		for _, stream := range []bool{false, true} {
			name := fmt.Sprintf("%dx%d/cached", sh[0], sh[1])
			if stream {
				name = fmt.Sprintf("%dx%d/stream", sh[0], sh[1])
			}
			b.Run(name, func(b *testing.B) {
				r := rand.New(rand.NewPCG(9, 10))
				one := makeMatrix(b, r, Q4_K, sh[0], sh[1])
				ms := []Matrix{one}
				if stream {
					ms = coldExperts(b, r, (128<<20)/len(one.Data), sh[0], sh[1])
				}
				x := randVec(r, sh[1], 1)
				out := make([]float32, sh[0])
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				k := 0
				pass := func(on bool) float64 {
					q4kPairs = on
					c0 := cputime.Thread()
					for range 20 {
						if err := matMulWith(kernels, nil, out, ms[k%len(ms)], x, 1); err != nil {
							b.Fatal(err)
						}
						k++
					}
					return (cputime.Thread() - c0).Seconds()
				}
				ratios, tp, tn := pairedRounds(b, 40, func() float64 { return pass(false) }, func() float64 { return pass(true) })
				flops := 2 * float64(sh[0]*sh[1]) * 20 * float64(len(ratios))
				b.ReportMetric(ratios[len(ratios)/2], "prev/new")
				b.ReportMetric(flops/tn/1e9, "newGFLOP/s")
				b.ReportMetric(flops/tp/1e9, "prevGFLOP/s")
			})
		}
	}
}
