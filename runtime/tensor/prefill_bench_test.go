package tensor

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/lesfarm/lesfarm/runtime/internal/cputime"
)

// BenchmarkQ4KExpertsCold runs the batched Q4_K product over 160 distinct
// expert-shaped matrices (512×1024, 47 MB in all, more than the L3 cache),
// one after another, as a prefill's expert loop does: every matrix comes
// from DRAM. GFLOP per CPU-second, one thread; "best" is the kernel set in
// use, "noprefetch" the same kernels without the software prefetch of the
// weights (noPrefetchKernels), side by side.
//
//	go test ./runtime/tensor -run XXX -bench Q4KExpertsCold
func BenchmarkQ4KExpertsCold(b *testing.B) {
	const experts, rows, cols = 160, 512, 1024
	r := rand.New(rand.NewPCG(9, 9))
	band := makeMatrix(b, r, Q4_K, rows, cols)
	ms := make([]Matrix, experts)
	for i := range ms {
		d := make([]byte, len(band.Data))
		copy(d, band.Data)
		d[0] ^= byte(i) // distinct pages
		ms[i] = Matrix{Type: Q4_K, Rows: rows, Cols: cols, Data: d}
	}
	sets := []struct {
		name string
		ks   map[Type]*kernel
	}{{"best", kernels}}
	if nk := noPrefetchKernels(); nk != nil {
		sets = append(sets, struct {
			name string
			ks   map[Type]*kernel
		}{"noprefetch", nk})
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
