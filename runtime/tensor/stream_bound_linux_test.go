package tensor

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/lesfarm/lesfarm/runtime/internal/cputime"
)

// BenchmarkStreamBound measures what one core streams on this machine and
// how close the single-vector Q4_K product (decode) comes to it, with the
// working set in L2, in L3 and in DRAM, for three matrix shapes of 288 KiB
// (2048-, 1024- and 512-column rows: 8, 4 and 2 super-blocks a row, as in
// the qwen35moe gate/up and DeltaNet products, the phone-shaped qwen3moe
// gate/up and its down). Each iteration runs every variant once, in turn,
// over the same 256 MiB, on one locked thread:
//
//   - read/L2, read/L3, read/DRAM: bytes.IndexByte for a byte that is not
//     there (AVX2 loads and compares, nothing else) over 288 KiB, 16 MiB
//     and a 1 GiB buffer;
//   - q4k/L2, q4k/L3: one matrix, then 56 (16 MiB), over and over;
//   - q4k/DRAM-seq: 1 GiB of matrices laid end to end and multiplied in
//     address order, so the hardware prefetchers see one stream;
//   - q4k/DRAM-perm: the same matrices in a random order, as a MoE decode
//     step reads its routed experts (every matrix starts a new stream);
//   - q4k/DRAM-perm-4KiB: the same on a copy left on 4 KiB pages.
//
// The buffers but the last are on 2 MiB pages (madvise MADV_HUGEPAGE, as
// the model's resident weights are, runtime/model/resident_mem.go).
//
// Metrics are GB per CPU-second of the thread for each variant and the
// medians over iterations of the paired ratios (per iteration, of the
// rates): q4k/DRAM-perm over read/DRAM (how near decode's products come to
// streaming), q4k/L2 over read/DRAM (the kernel's own speed against the
// stream), q4k/DRAM-perm over q4k/L2 and q4k/DRAM-seq over q4k/DRAM-perm.
//
//	go test ./runtime/tensor -run XXX -bench StreamBound -benchtime 20x
func BenchmarkStreamBound(b *testing.B) {
	const pass = 256 << 20 // bytes per variant and iteration
	if testing.Short() {
		b.Skip("allocates 3 GiB")
	}
	r := rand.New(rand.NewPCG(31, 4))
	rbuf := hugeBytes(1 << 30) // written, so no page is the shared zero page
	for i := range rbuf {
		rbuf[i] = byte(i) & 0x7f
	}
	var rd int
	read := func(buf []byte, walk bool) {
		for done := 0; done < pass; {
			chunk := buf
			if walk { // 16 MiB at a time through the whole buffer
				const step = 16 << 20
				off := rd % (len(buf) - step)
				chunk = buf[off : off+step]
				rd += step
			}
			if bytes.IndexByte(chunk, 0xA5) >= 0 {
				b.Fatal("sentinel byte present")
			}
			done += len(chunk)
		}
	}
	big, big4k := hugeBytes(1<<30), make([]byte, 1<<30)
	for _, sh := range [][2]int{{256, 2048}, {512, 1024}, {1024, 512}} {
		b.Run(fmt.Sprintf("%dx%d", sh[0], sh[1]), func(b *testing.B) {
			rows, cols := sh[0], sh[1]
			one := makeMatrix(b, r, Q4_K, rows, cols)
			size := len(one.Data)
			count := len(big) / size
			var all, all4k []Matrix
			for i := range count {
				copy(big[i*size:], one.Data)
				copy(big4k[i*size:], one.Data)
				all = append(all, Matrix{Type: Q4_K, Rows: rows, Cols: cols, Data: big[i*size : (i+1)*size]})
				all4k = append(all4k, Matrix{Type: Q4_K, Rows: rows, Cols: cols, Data: big4k[i*size : (i+1)*size]})
			}
			perm, perm4k := make([]Matrix, count), make([]Matrix, count)
			for i, j := range r.Perm(count) {
				perm[i], perm4k[i] = all[j], all4k[j]
			}
			x := randVec(r, cols, 1)
			out := make([]float32, rows)
			perPass := pass / size
			var at int // next DRAM matrix, so a pass never finds the last one in L3
			product := func(ms []Matrix, walk bool) {
				for k := range perPass {
					m := ms[k%len(ms)]
					if walk {
						m = ms[at%len(ms)]
						at++
					}
					if err := matMulWith(kernels, nil, out, m, x, 1); err != nil {
						b.Fatal(err)
					}
				}
			}
			variants := []struct {
				name string
				run  func()
			}{
				{"read/L2", func() { read(rbuf[:size], false) }},
				{"read/L3", func() { read(rbuf[:16<<20], false) }},
				{"read/DRAM", func() { read(rbuf, true) }},
				{"q4k/L2", func() { product(all[:1], false) }},
				{"q4k/L3", func() { product(all[:(16<<20)/size], false) }},
				{"q4k/DRAM-seq", func() { product(all, true) }},
				{"q4k/DRAM-perm", func() { product(perm, true) }},
				{"q4k/DRAM-perm-4KiB", func() { product(perm4k, true) }},
			}
			const readDRAM, l2, seq, perm1 = 2, 3, 5, 6
			ratios := map[string][2]int{ // name: numerator, denominator (rates)
				"perm/read": {perm1, readDRAM}, "L2/read": {l2, readDRAM},
				"perm/L2": {perm1, l2}, "seq/perm": {seq, perm1},
			}
			rate := func(i int, it []time.Duration) float64 { // bytes per CPU-second
				if i >= l2 {
					return float64(perPass*size) / it[i].Seconds()
				}
				return pass / it[i].Seconds()
			}
			got := map[string][]float64{}
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			cpu := make([]time.Duration, len(variants))
			b.ReportAllocs()
			for b.Loop() {
				it := make([]time.Duration, len(variants))
				for i, v := range variants {
					c0 := cputime.Thread()
					v.run()
					it[i] = cputime.Thread() - c0
					cpu[i] += it[i]
				}
				for name, nd := range ratios {
					got[name] = append(got[name], rate(nd[0], it)/rate(nd[1], it))
				}
			}
			for i, v := range variants {
				if cpu[i] <= 0 {
					return
				}
				n := pass // bytes per pass: the products' is a whole number of matrices
				if i >= l2 {
					n = perPass * size
				}
				b.ReportMetric(float64(n)*float64(b.N)/cpu[i].Seconds()/1e9, v.name+"-GB/cpu-s")
			}
			for name, g := range got {
				slices.Sort(g)
				b.ReportMetric(g[len(g)/2], name)
			}
		})
	}
}

// hugeBytes returns n bytes starting on a 2 MiB boundary, advised as
// transparent huge pages (ignored where THP is off).
func hugeBytes(n int) []byte {
	const huge = 2 << 20
	buf := make([]byte, n+huge)
	off := (huge - int(uintptr(unsafe.Pointer(&buf[0]))%huge)) % huge
	b := buf[off : off+n : off+n]
	_ = syscall.Madvise(b[:n&^(huge-1)], syscall.MADV_HUGEPAGE)
	return b
}

// BenchmarkReadStreams measures how fast one core reads DRAM depending on
// how many far-apart streams it reads at once: one F32 product of a
// vector with 256 MiB on 2 MiB pages laid out as R rows (the F32 kernel
// takes rows four at a time, so R = 1 is one stream and R ≥ 4 is four
// streams 256 MiB/R apart, then the next four). BenchmarkStreamBound's
// read/DRAM is one stream (bytes.IndexByte); the decode kernels read about
// one stream too (two adjacent rows at a time), so this says whether
// decode could be bound by what one stream brings in rather than by DRAM.
// GB per CPU-second of the thread.
//
//	go test ./runtime/tensor -run XXX -bench ReadStreams -benchtime 10x
func BenchmarkReadStreams(b *testing.B) {
	const size = 256 << 20
	if testing.Short() {
		b.Skip("allocates 256 MiB")
	}
	buf := hugeBytes(size)
	for i := range buf {
		buf[i] = byte(i) & 0x3f // small finite floats
	}
	for _, rows := range []int{1, 4, 16, 64, 1024} {
		b.Run(fmt.Sprintf("rows%d", rows), func(b *testing.B) {
			cols := size / 4 / rows
			m := Matrix{Type: F32, Rows: rows, Cols: cols, Data: buf}
			x, dst := make([]float32, cols), make([]float32, rows)
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			c0 := cputime.Thread()
			for b.Loop() {
				if err := MatVec(nil, dst, m, x); err != nil {
					b.Fatal(err)
				}
			}
			if cpu := (cputime.Thread() - c0).Seconds(); cpu > 0 {
				b.ReportMetric(float64(size)*float64(b.N)/cpu/1e9, "GB/cpu-s")
			}
		})
	}
}
