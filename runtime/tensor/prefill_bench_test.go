package tensor

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"

	"github.com/lesfarm/lesfarm/runtime/internal/cputime"
)

// BenchmarkQ4KExpertsCold runs the batched Q4_K product over 160 distinct
// expert-shaped matrices (512×1024, 47 MB in all, more than the L3 cache),
// one after another, as a prefill's expert loop does: every matrix comes
// from DRAM. GFLOP per CPU-second, one thread; "best" is the kernel set in
// use, "prev" the previous 2-8 vector kernels (prevVecsKernels), side by
// side.
//
//	go test ./runtime/tensor -run XXX -bench Q4KExpertsCold
func BenchmarkQ4KExpertsCold(b *testing.B) {
	const experts, rows, cols = 160, 512, 1024
	r := rand.New(rand.NewPCG(9, 9))
	ms := coldExperts(b, r, experts, rows, cols)
	sets := []struct {
		name string
		ks   map[Type]*kernel
	}{{"best", kernels}}
	if nk := prevVecsKernels(); nk != nil {
		sets = append(sets, struct {
			name string
			ks   map[Type]*kernel
		}{"prev", nk})
	}
	for _, n := range []int{1, 2, 3, 4, 5, 6, 7, 8} {
		x := randVec(r, n*cols, 1)
		dst := make([]float32, n*rows)
		for _, set := range sets {
			b.Run(fmt.Sprintf("n%d/%s", n, set.name), func(b *testing.B) {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				b.ReportAllocs()
				cpu0 := cputime.Thread()
				k := 0
				for b.Loop() {
					if err := matMulWith(set.ks, nil, dst, ms[k], x, n); err != nil {
						b.Fatal(err)
					}
					k = (k + 1) % experts
				}
				flops := 2 * float64(rows*cols*n) * float64(b.N)
				if cpu := (cputime.Thread() - cpu0).Seconds(); cpu > 0 {
					b.ReportMetric(flops/cpu/1e9, "cpuGFLOP/s")
				}
			})
		}
	}
}

// BenchmarkQ4KVecsPaired alternates the batched Q4_K kernels in use with
// the previous ones (prevVecsKernels for 2-8 vectors, and q4kPairs off:
// the one-row single-vector kernel) over 160 cold expert matrices as in
// BenchmarkQ4KExpertsCold, of the phone-shaped model (512×1024) and of
// qwen35moe (gate/up 512×2048, down 2048×512), 20 rounds of one pass each
// per n, and reports the median over rounds of the CPU-time ratio prev/new
// (above 1: the kernels in use are faster) and both rates. Pairing within
// a round keeps host noise out of the ratio.
//
//	go test ./runtime/tensor -run XXX -bench Q4KVecsPaired -benchtime 1x
func BenchmarkQ4KVecsPaired(b *testing.B) {
	pk := prevVecsKernels()
	if pk == nil {
		b.Skip("no previous kernels in this build")
	}
	defer func(on bool) { q4kPairs = on }(q4kPairs)
	const experts, rounds = 160, 20
	for _, sh := range [][2]int{{512, 1024}, {512, 2048}, {2048, 512}} {
		rows, cols := sh[0], sh[1]
		r := rand.New(rand.NewPCG(9, 9))
		ms := coldExperts(b, r, experts, rows, cols)
		for _, n := range []int{1, 2, 3, 4, 5, 6, 7, 8} {
			x := randVec(r, n*cols, 1)
			dst := make([]float32, n*rows)
			b.Run(fmt.Sprintf("%dx%d/n%d", rows, cols, n), func(b *testing.B) {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				pass := func(ks map[Type]*kernel, pairs bool) float64 {
					q4kPairs = pairs
					c0 := cputime.Thread()
					for _, m := range ms {
						if err := matMulWith(ks, nil, dst, m, x, n); err != nil {
							b.Fatal(err)
						}
					}
					return (cputime.Thread() - c0).Seconds()
				}
				var ratios []float64
				var tn, tp float64
				for b.Loop() {
					ratios = ratios[:0]
					for range rounds {
						p := pass(pk, false)
						q := pass(kernels, true)
						ratios = append(ratios, p/q)
						tn, tp = tn+q, tp+p
					}
				}
				slices.Sort(ratios)
				flops := 2 * float64(rows*cols*n*experts*rounds) * float64(b.N)
				b.ReportMetric(ratios[len(ratios)/2], "prev/new")
				b.ReportMetric(flops/tn/1e9, "newGFLOP/s")
				b.ReportMetric(flops/tp/1e9, "prevGFLOP/s")
			})
		}
		runtime.GC()
	}
}

// coldExperts returns n Q4_K matrices of rows×cols with the same weights
// but distinct pages (each copy's first byte differs), so walking them in
// turn reads memory rather than cache, as a prefill's experts do.
func coldExperts(b *testing.B, r *rand.Rand, n, rows, cols int) []Matrix {
	band := makeMatrix(b, r, Q4_K, rows, cols)
	ms := make([]Matrix, n)
	for i := range ms {
		d := make([]byte, len(band.Data))
		copy(d, band.Data)
		d[0] ^= byte(i)
		ms[i] = Matrix{Type: Q4_K, Rows: rows, Cols: cols, Data: d}
	}
	return ms
}
