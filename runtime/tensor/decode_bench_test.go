package tensor

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/runtime/internal/cputime"
)

// BenchmarkDecodeStream measures single-vector products (decode) the way a
// MoE decode step runs them: many distinct expert-shaped matrices, 128 MiB
// of weights in all, so every product streams its weights from DRAM. Each
// iteration runs one pass with the current kernels ("new"), one with the
// previous decode kernels ("prev", amd64) and a copy of as many bytes, so
// the three rates are interleaved on the same machine state. Metrics are
// weight GB per CPU-second of the benchmark thread and the ratio to the
// copy rate (copy counts bytes copied, as bench's "of copy" does).
//
//	go test ./runtime/tensor -run XXX -bench DecodeStream -benchtime 20x
func BenchmarkDecodeStream(b *testing.B) {
	const total = 128 << 20
	for _, typ := range []Type{Q4_K, Q8_0, Q6_K, F16, Q2_K, Q3_K} {
		for _, sh := range [][2]int{{512, 1024}, {1024, 512}, {2048, 2048}} {
			b.Run(fmt.Sprintf("%s/%dx%d", typ, sh[0], sh[1]), func(b *testing.B) {
				r := rand.New(rand.NewPCG(7, uint64(typ)))
				one := makeMatrix(b, r, typ, sh[0], sh[1])
				count := max(1, total/len(one.Data))
				data := make([]byte, count*len(one.Data))
				for i := range count {
					copy(data[i*len(one.Data):], one.Data)
				}
				ms := make([]Matrix, count)
				for i := range ms {
					ms[i] = Matrix{Type: typ, Rows: sh[0], Cols: sh[1], Data: data[i*len(one.Data) : (i+1)*len(one.Data)]}
				}
				src, dst := make([]byte, len(data)), make([]byte, len(data))
				for i := range src {
					src[i] = byte(i)
				}
				copy(dst, src)
				x := randVec(r, sh[1], 1)
				out := make([]float32, sh[0])
				sets := []struct {
					name string
					ks   map[Type]*kernel
				}{{"new", kernels}}
				if pk := prevDecodeKernels(); pk != nil {
					sets = append(sets, struct {
						name string
						ks   map[Type]*kernel
					}{"prev", pk})
				}
				cpu := make([]time.Duration, len(sets)+1)
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				b.SetBytes(int64(len(data)))
				b.ReportAllocs()
				for b.Loop() {
					for i, set := range sets {
						c0 := cputime.Thread()
						for _, m := range ms {
							if err := matMulWith(set.ks, nil, out, m, x, 1); err != nil {
								b.Fatal(err)
							}
						}
						cpu[i] += cputime.Thread() - c0
					}
					c0 := cputime.Thread()
					copy(dst, src)
					cpu[len(sets)] += cputime.Thread() - c0
				}
				gb := func(d time.Duration) float64 {
					return float64(len(data)) * float64(b.N) / d.Seconds() / 1e9
				}
				if cpu[len(sets)] <= 0 {
					return
				}
				cp := gb(cpu[len(sets)])
				b.ReportMetric(cp, "copyGB/cpu-s")
				for i, set := range sets {
					if cpu[i] > 0 {
						b.ReportMetric(gb(cpu[i]), set.name+"GB/cpu-s")
						b.ReportMetric(gb(cpu[i])/cp, set.name+"/copy")
					}
				}
			})
		}
	}
}
