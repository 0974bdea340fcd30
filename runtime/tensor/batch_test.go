package tensor

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/lesfarm/lesfarm/runtime/internal/cputime"
)

// TestBatchedMatchesGeneric checks MatMul over n vectors, for every type
// with a kernel and batch sizes around the batched kernels' group size,
// against the generic kernel applied one vector at a time, bit for bit:
// prefill and speculative verification must produce the logits decode
// produces.
func TestBatchedMatchesGeneric(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	for _, tc := range matTypes {
		t.Run(tc.t.String(), func(t *testing.T) {
			bs := tc.t.BlockSize()
			// 17 super-blocks: past the Q4_K side array's stack size
			// (q4kAuxStack); 128 F32 columns: rows of 512 bytes, the
			// prefetching loop of f32Rows1 (rows of at most 1 KiB)
			for _, cols := range []int{512, 8 * 37, 128, 37, 8*bs + 5, 3 * bs, 13 * bs, 17 * bs} {
				if cols%bs != 0 || cols < 8 || (bs == QK_K && cols > 4*QK_K && testing.Short()) {
					continue
				}
				testBatched(t, r, tc.t, makeMatrix(t, r, tc.t, batchRows, cols))
				if tc.t == Q8_0 || tc.t == Q6_K || tc.t == Q4_K || tc.t == Q2_K || tc.t == Q3_K {
					// every byte pattern: Q8_0 -128, Q6_K scale -128, Q2_K/Q3_K
					// every scale, min and high-bit pattern
					testBatched(t, r, tc.t, randomBytesMatrix(r, tc.t, batchRows, cols))
				}
			}
		})
	}
}

// batchRows is the row count of TestBatchedMatchesGeneric's matrices.
const batchRows = 13

// randomBytesMatrix fills a matrix with random bytes and sane half scales,
// so that extreme quants (Q8_0 -128, Q6_K scales -128) are covered.
func randomBytesMatrix(r *rand.Rand, typ Type, rows, cols int) Matrix {
	rb, _ := typ.RowSize(cols)
	data := make([]byte, rows*rb)
	for i := range data {
		data[i] = uint8(r.Uint32())
	}
	bs := typ.TypeSize()
	for off := 0; off < len(data); off += bs {
		switch typ {
		case Q8_0:
			binary.LittleEndian.PutUint16(data[off:], F32ToF16(0.01*float32(r.Float64())))
		case Q6_K:
			binary.LittleEndian.PutUint16(data[off+208:], F32ToF16(0.001*float32(r.Float64())))
		case Q4_K:
			binary.LittleEndian.PutUint16(data[off:], F32ToF16(0.01*float32(r.Float64())))
			binary.LittleEndian.PutUint16(data[off+2:], F32ToF16(0.01*float32(r.Float64())))
		case Q2_K:
			binary.LittleEndian.PutUint16(data[off+80:], F32ToF16(0.01*float32(r.Float64())))
			binary.LittleEndian.PutUint16(data[off+82:], F32ToF16(0.01*float32(r.Float64())))
		case Q3_K:
			binary.LittleEndian.PutUint16(data[off+108:], F32ToF16(0.001*float32(r.Float64())))
		}
	}
	return Matrix{Type: typ, Rows: rows, Cols: cols, Data: data}
}

func testBatched(t *testing.T, r *rand.Rand, typ Type, m Matrix) {
	t.Helper()
	rows, cols := m.Rows, m.Cols
	for _, n := range []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 17} {
		x := randVec(r, n*cols, float32(n))
		x[3] = 0
		x[cols-1] = -x[1]
		for _, threads := range []int{1, 2} {
			p := NewPool(threads)
			got := make([]float32, n*rows)
			if err := MatMul(p, got, m, x, n); err != nil {
				t.Fatal(err)
			}
			p.Close()
			for v := range n {
				want := genericMatVec(t, m, x[v*cols:(v+1)*cols])
				for i := range rows {
					g := got[v*rows+i]
					if kernels[typ].exact && math.Float32bits(g) != math.Float32bits(want[i]) {
						t.Fatalf("cols=%d n=%d threads=%d vector %d row %d: %v != generic %v", cols, n, threads, v, i, g, want[i])
					}
				}
			}
		}
	}
}

// BenchmarkMatMulBatched measures batched products of the expert shapes of
// the phone-shaped model (gate/up 512×1024, down 1024×512) for n vectors,
// one thread, in GFLOP per CPU-second: the batched kernels against the
// previous per-vector row kernel ("row") where one exists.
//
//	go test ./runtime/tensor -run XXX -bench MatMulBatched
func BenchmarkMatMulBatched(b *testing.B) {
	for _, typ := range []Type{Q2_K, Q3_K, Q4_K, Q6_K, Q8_0, F16, F32} {
		for _, sh := range [][2]int{{512, 1024}, {1024, 512}} {
			r := rand.New(rand.NewPCG(3, uint64(typ)))
			m := makeMatrix(b, r, typ, sh[0], sh[1])
			for _, n := range []int{1, 2, 3, 4, 8, 64} {
				x := randVec(r, n*sh[1], 1)
				dst := make([]float32, n*sh[0])
				sets := []struct {
					name string
					ks   map[Type]*kernel
				}{{"best", kernels}}
				if pk := prevKernels(); pk != nil && typ == Q4_K {
					sets = append(sets, struct {
						name string
						ks   map[Type]*kernel
					}{"prev", pk})
				}
				if pk := prevK23Kernels(); pk != nil && (typ == Q2_K || typ == Q3_K) {
					sets = append(sets, struct {
						name string
						ks   map[Type]*kernel
					}{"prev", pk})
				}
				if rk := rowKernels(); rk != nil && rk[typ] != nil {
					sets = append(sets, struct {
						name string
						ks   map[Type]*kernel
					}{"row", rk})
				}
				for _, set := range sets {
					b.Run(fmt.Sprintf("%s/%dx%d/n%d/%s", typ, sh[0], sh[1], n, set.name), func(b *testing.B) {
						runtime.LockOSThread()
						defer runtime.UnlockOSThread()
						b.ReportAllocs()
						cpu0 := cputime.Thread()
						for b.Loop() {
							if err := matMulWith(set.ks, nil, dst, m, x, n); err != nil {
								b.Fatal(err)
							}
						}
						flops := 2 * float64(sh[0]*sh[1]*n) * float64(b.N)
						if cpu := (cputime.Thread() - cpu0).Seconds(); cpu > 0 {
							b.ReportMetric(flops/cpu/1e9, "cpuGFLOP/s")
						}
					})
				}
			}
		}
	}
}
