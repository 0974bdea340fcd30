package tensor

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/lesfarm/lesfarm/runtime/internal/cputime"
)

// BenchmarkMatVec measures matrix-vector products per weight type, shape,
// kernel set (generic ggml port, pure-Go fast, SIMD when built with it) and
// thread count. SetBytes is the weight bytes read per product, so MB/s is the
// effective weight bandwidth; GFLOP/s counts 2 flops per weight.
//
//	go test ./runtime/tensor -run XXX -bench MatVec -benchtime 20x
//	GOEXPERIMENT=simd go test ./runtime/tensor -run XXX -bench MatVec
//
// t1 runs also report cpuGFLOP/s: flops per CPU-second of the benchmark
// thread, the stable figure on a shared machine.
func BenchmarkMatVec(b *testing.B) {
	types := []Type{F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K}
	shapes := [][2]int{{2048, 2048}, {512, 1024}}
	sets := []struct {
		name string
		ks   map[Type]*kernel
	}{{"generic", genericKernels}, {"go", goKernels}, {"simd", simdOnly()}, {"best", kernels}}
	simd := simdOnly()
	for _, typ := range types {
		for _, sh := range shapes {
			// Built on first use, so a -bench filter skips the (slow)
			// quantization of matrices it does not run.
			var m Matrix
			var x, dst []float32
			setup := func(b *testing.B) {
				if m.Data == nil {
					r := rand.New(rand.NewPCG(1, uint64(typ)))
					m = makeMatrix(b, r, typ, sh[0], sh[1])
					x = randVec(r, sh[1], 1)
					dst = make([]float32, sh[0])
				}
			}
			for _, set := range sets {
				impl := set.name
				if set.name == "best" || set.name == "simd" {
					if set.ks[typ] == goKernels[typ] || (set.name == "best" && set.ks[typ].impl == simd[typ].impl) {
						continue // no such kernel for this type, or already measured
					}
					impl = set.ks[typ].impl
				}
				for _, threads := range []int{1, 2} {
					name := fmt.Sprintf("%s/%dx%d/%s/t%d", typ, sh[0], sh[1], impl, threads)
					b.Run(name, func(b *testing.B) {
						setup(b)
						p := NewPool(threads)
						defer p.Close()
						runtime.LockOSThread()
						defer runtime.UnlockOSThread()
						b.SetBytes(int64(len(m.Data)))
						b.ReportAllocs()
						cpu0 := cputime.Thread()
						for b.Loop() {
							if err := matMulWith(set.ks, p, dst, m, x, 1); err != nil {
								b.Fatal(err)
							}
						}
						flops := 2 * float64(sh[0]) * float64(sh[1]) * float64(b.N)
						b.ReportMetric(flops/b.Elapsed().Seconds()/1e9, "GFLOP/s")
						if cpu := (cputime.Thread() - cpu0).Seconds(); threads == 1 && cpu > 0 {
							// Single-threaded: GFLOP/s per CPU-second of this
							// thread, immune to time stolen by other processes.
							b.ReportMetric(flops/cpu/1e9, "cpuGFLOP/s")
						}
					})
				}
			}
		}
	}
}

// BenchmarkMatMulBatch measures batched prefill (8 vectors per weight pass).
func BenchmarkMatMulBatch(b *testing.B) {
	r := rand.New(rand.NewPCG(2, 2))
	const rows, cols, n = 2048, 2048, 8
	for _, typ := range []Type{F32, Q8_0, Q4_K, Q6_K} {
		m := makeMatrix(b, r, typ, rows, cols)
		x := randVec(r, n*cols, 1)
		dst := make([]float32, n*rows)
		b.Run(typ.String(), func(b *testing.B) {
			p := NewPool(2)
			defer p.Close()
			b.ReportAllocs()
			for b.Loop() {
				if err := MatMul(p, dst, m, x, n); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(2*float64(rows*cols*n)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

// BenchmarkCopy is the memory-bandwidth reference: copy a 256 MiB buffer
// (MB/s counts bytes copied; read+write traffic is twice that).
func BenchmarkCopy(b *testing.B) {
	const size = 256 << 20
	src := make([]byte, size)
	dst := make([]byte, size)
	for i := range src {
		src[i] = byte(i)
	}
	copy(dst, src) // fault the pages in before timing
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b.SetBytes(size)
	b.ReportAllocs()
	cpu0 := cputime.Thread()
	for b.Loop() {
		copy(dst, src)
	}
	if cpu := (cputime.Thread() - cpu0).Seconds(); cpu > 0 {
		b.ReportMetric(float64(size)*float64(b.N)/cpu/1e6, "cpuMB/s")
	}
}

// BenchmarkQuantizeActivation measures the per-product activation cost.
func BenchmarkQuantizeActivation(b *testing.B) {
	r := rand.New(rand.NewPCG(3, 3))
	x := randVec(r, 4096, 1)
	q8k := make([]blockQ8K, 4096/QK_K)
	q80 := make([]blockQ8_0, 4096/32)
	cpuNs := func(b *testing.B, f func()) {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		cpu0 := cputime.Thread()
		for b.Loop() {
			f()
		}
		b.ReportMetric(float64(cputime.Thread()-cpu0)/float64(b.N), "cpu-ns/op")
	}
	b.Run("Q8_K", func(b *testing.B) { cpuNs(b, func() { quantizeQ8K(x, q8k) }) })
	b.Run("Q8_K-go", func(b *testing.B) { cpuNs(b, func() { quantizeQ8KGo(x, q8k) }) })
	b.Run("Q8_0", func(b *testing.B) { cpuNs(b, func() { quantizeQ8_0(x, q80) }) })
}

// BenchmarkDispatch measures the fixed cost of a small product (a 16×256
// Q4_K matrix) and of an expert-sized one: nil pool, 1- and 2-thread pools.
func BenchmarkDispatch(b *testing.B) {
	r := rand.New(rand.NewPCG(4, 4))
	for _, sh := range [][2]int{{16, 256}, {512, 1024}} {
		m := makeMatrix(b, r, Q4_K, sh[0], sh[1])
		x := randVec(r, sh[1], 1)
		dst := make([]float32, sh[0])
		for _, threads := range []int{0, 1, 2} {
			b.Run(fmt.Sprintf("%dx%d/pool%d", sh[0], sh[1], threads), func(b *testing.B) {
				var p *Pool
				if threads > 0 {
					p = NewPool(threads)
					defer p.Close()
				}
				b.ReportAllocs()
				for b.Loop() {
					if err := MatVec(p, dst, m, x); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkMatVecLarge streams a Q4_K matrix far larger than the CPU caches
// (16384×8192, 72 MiB), as decoding a real model does: MB/s is the effective
// weight bandwidth, to compare with BenchmarkCopy.
func BenchmarkMatVecLarge(b *testing.B) {
	r := rand.New(rand.NewPCG(5, 5))
	const rows, cols = 16384, 8192
	for _, typ := range []Type{Q4_K, Q8_0} {
		// Quantizing 128M values is slow; build one 256-row band and repeat it.
		band := makeMatrix(b, r, typ, 256, cols)
		data := make([]byte, 0, rows/256*len(band.Data))
		for i := 0; i < rows/256; i++ {
			data = append(data, band.Data...)
		}
		m := Matrix{Type: typ, Rows: rows, Cols: cols, Data: data}
		x := randVec(r, cols, 1)
		dst := make([]float32, rows)
		for _, threads := range []int{1, 2} {
			b.Run(fmt.Sprintf("%s/t%d", typ, threads), func(b *testing.B) {
				p := NewPool(threads)
				defer p.Close()
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				b.SetBytes(int64(len(m.Data)))
				cpu0 := cputime.Thread()
				for b.Loop() {
					if err := MatVec(p, dst, m, x); err != nil {
						b.Fatal(err)
					}
				}
				if cpu := (cputime.Thread() - cpu0).Seconds(); threads == 1 && cpu > 0 {
					b.ReportMetric(float64(len(m.Data))*float64(b.N)/cpu/1e6, "cpuMB/s")
				}
			})
		}
	}
}

// BenchmarkQuantize measures the reference quantizers (synth and quantize
// write whole models with them); MB/s counts float32 input bytes.
func BenchmarkQuantize(b *testing.B) {
	r := rand.New(rand.NewPCG(6, 6))
	x := randVec(r, 1<<16, 1)
	for _, typ := range []Type{F16, Q8_0, Q4_0, Q5_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K} {
		rb, _ := typ.RowSize(len(x))
		dst := make([]byte, rb)
		b.Run(typ.String(), func(b *testing.B) {
			b.SetBytes(int64(4 * len(x)))
			b.ReportAllocs()
			for b.Loop() {
				if err := Quantize(typ, x, dst); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// simdOnly is the pure-Go set overlaid with the SIMD kernels alone
// (archsimd or NEON, without the amd64 assembly), for side-by-side numbers.
func simdOnly() map[Type]*kernel {
	m := make(map[Type]*kernel, len(goKernels))
	for t, k := range goKernels {
		m[t] = k
	}
	for t, k := range simdKernels() {
		m[t] = k
	}
	return m
}
