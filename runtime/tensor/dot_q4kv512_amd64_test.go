//go:build amd64 && !purego

package tensor

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/runtime/internal/cputime"
)

// TestQ4KVecs1AVX512 checks the decode product (one vector) of Q4_K
// matrices with the two-row AVX-512 kernel and with the AVX2 kernel alone,
// bit for bit against the generic kernel, for even and odd row counts
// (the odd last row takes the AVX2 kernel), one and many super-blocks,
// random weights and random bytes (every quant and scale pattern).
func TestQ4KVecs1AVX512(t *testing.T) {
	if !(hasAVX512 && kernels[Q4_K].impl == "avx2-asm") {
		t.Skip("this CPU has no AVX-512 F/BW/VL (or no AVX2 kernels): q4kVecs1x2AVX512 cannot run here")
	}
	defer func(on bool) { q4kAVX512 = on }(q4kAVX512)
	r := rand.New(rand.NewPCG(51, 52))
	p := NewPool(1)
	defer p.Close()
	for _, rows := range []int{1, 2, 3, 4, 7, 64} {
		for _, nb := range []int{1, 2, 5, 16} {
			for _, m := range []Matrix{makeMatrix(t, r, Q4_K, rows, nb*QK_K), randomBytesMatrix(r, Q4_K, rows, nb*QK_K)} {
				x := randVec(r, nb*QK_K, 1)
				want := genericMatVec(t, m, x)
				for _, on := range []bool{true, false} {
					q4kAVX512 = on
					got := make([]float32, rows)
					if err := MatMul(p, got, m, x, 1); err != nil {
						t.Fatal(err)
					}
					for i := range rows {
						if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
							t.Fatalf("rows %d, %d blocks, avx512 %v: row %d %v != generic %v", rows, nb, on, i, got[i], want[i])
						}
					}
				}
			}
		}
	}
}

// BenchmarkQ4KDecodeAVX512 measures the decode product of qwen35moe's
// expert shapes (gate/up 512×2048, down 2048×512) and a 2048×2048 matrix
// in Q4_K with the two-row AVX-512 kernel and with the AVX2 kernel alone,
// interleaved in every iteration: "stream" runs over 128 MiB of distinct
// matrices (weights from DRAM, as a MoE decode step), "cached" repeats one
// matrix (weights in cache: the kernel's own speed). Metrics are weight GB
// per CPU-second of the benchmark thread for each kernel and their ratio.
//
//	go test ./runtime/tensor -run XXX -bench Q4KDecodeAVX512 -benchtime 20x
func BenchmarkQ4KDecodeAVX512(b *testing.B) {
	if !hasAVX512 {
		b.Skip("no AVX-512 F/BW/VL on this CPU")
	}
	defer func(on bool) { q4kAVX512 = on }(q4kAVX512)
	for _, sh := range [][2]int{{512, 2048}, {2048, 512}, {2048, 2048}} {
		for _, stream := range []bool{true, false} {
			name := fmt.Sprintf("%dx%d/cached", sh[0], sh[1])
			if stream {
				name = fmt.Sprintf("%dx%d/stream", sh[0], sh[1])
			}
			b.Run(name, func(b *testing.B) {
				r := rand.New(rand.NewPCG(9, 10))
				one := makeMatrix(b, r, Q4_K, sh[0], sh[1])
				count := 1
				if stream {
					count = max(1, (128<<20)/len(one.Data))
				}
				data := make([]byte, count*len(one.Data))
				ms := make([]Matrix, count)
				for i := range ms {
					copy(data[i*len(one.Data):], one.Data)
					ms[i] = Matrix{Type: Q4_K, Rows: sh[0], Cols: sh[1], Data: data[i*len(one.Data) : (i+1)*len(one.Data)]}
				}
				x := randVec(r, sh[1], 1)
				out := make([]float32, sh[0])
				reps := max(1, (32<<20)/len(data)) // ≥ 32 MiB of weights per timing
				var cpu [2]time.Duration
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				b.SetBytes(int64(len(data) * reps))
				for b.Loop() {
					for i, on := range []bool{true, false} {
						q4kAVX512 = on
						c0 := cputime.Thread()
						for range reps {
							for _, m := range ms {
								if err := matMulWith(kernels, nil, out, m, x, 1); err != nil {
									b.Fatal(err)
								}
							}
						}
						cpu[i] += cputime.Thread() - c0
					}
				}
				if cpu[0] <= 0 || cpu[1] <= 0 {
					return
				}
				gb := func(d time.Duration) float64 { return float64(len(data)*reps) * float64(b.N) / d.Seconds() / 1e9 }
				b.ReportMetric(gb(cpu[0]), "avx512-GB/cpu-s")
				b.ReportMetric(gb(cpu[1]), "avx2-GB/cpu-s")
				b.ReportMetric(cpu[1].Seconds()/cpu[0].Seconds(), "x-avx2")
			})
		}
	}
}
