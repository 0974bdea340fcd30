package tensor

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"

	"github.com/lesfarm/lesfarm/runtime/internal/cputime"
)

// BenchmarkQ4KSwizzled compares Q4_K products on swizzled rows with the
// same products on the file's layout, one thread, for 1 vector (decode)
// and 8 (prefill), on expert and DeltaNet shapes, weights in cache
// ("cached") or streamed from 128 MiB of distinct matrices ("stream", as
// a MoE decode step reads them): 40 rounds of 20 products each per
// iteration, alternated, reporting the median per-round CPU-time ratio
// native/swizzled (above 1: swizzled is faster) and both rates in GB of
// weights per CPU-second.
//
//	go test ./runtime/tensor -run XXX -bench Q4KSwizzled -benchtime 1x
func BenchmarkQ4KSwizzled(b *testing.B) {
	if !Swizzles(Q4_K) {
		b.Skip("no swizzled layout on this machine")
	}
	for _, sh := range [][2]int{{512, 2048}, {2048, 512}, {8192, 2048}} {
		for _, nv := range []int{1, 8} {
			for _, stream := range []bool{false, true} {
				where := "cached"
				if stream {
					where = "stream"
				}
				b.Run(fmt.Sprintf("%dx%d/n%d/%s", sh[0], sh[1], nv, where), func(b *testing.B) {
					benchSwizzled(b, sh[0], sh[1], nv, stream)
				})
			}
		}
	}
}

func benchSwizzled(b *testing.B, rows, cols, nv int, stream bool) {
	r := rand.New(rand.NewPCG(9, 10))
	ms := []Matrix{makeMatrix(b, r, Q4_K, rows, cols)}
	if stream {
		ms = coldExperts(b, r, (128<<20)/len(ms[0].Data), rows, cols)
	}
	sw := make([]Matrix, len(ms))
	for i, m := range ms {
		sw[i] = m
		sw[i].Data = slices.Clone(m.Data)
		if _, err := Swizzle(Q4_K, sw[i].Data); err != nil {
			b.Fatal(err)
		}
		sw[i].Swizzled = true
	}
	x := randVec(r, nv*cols, 1)
	out := make([]float32, nv*rows)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	k := 0
	pass := func(set []Matrix) float64 {
		c0 := cputime.Thread()
		for range 20 {
			if err := MatMul(nil, out, set[k%len(set)], x, nv); err != nil {
				b.Fatal(err)
			}
			k++
		}
		return (cputime.Thread() - c0).Seconds()
	}
	ratios, tn, ts := pairedRounds(b, 40, func() float64 { return pass(ms) }, func() float64 { return pass(sw) })
	bytes := float64(len(ms[0].Data)) * 20 * float64(len(ratios))
	b.ReportMetric(ratios[len(ratios)/2], "native/swizzled")
	b.ReportMetric(bytes/tn/1e9, "nativeGB/s")
	b.ReportMetric(bytes/ts/1e9, "swizzledGB/s")
}

// pairedRounds runs rounds pairs of first() and second() (each returning
// the CPU seconds of one pass) per iteration of b.Loop, alternated, and
// returns the sorted per-pair ratios first/second and both totals.
func pairedRounds(b *testing.B, rounds int, first, second func() float64) (ratios []float64, t1, t2 float64) {
	for b.Loop() {
		for range rounds {
			x, y := first(), second()
			ratios = append(ratios, x/y)
			t1, t2 = t1+x, t2+y
		}
	}
	slices.Sort(ratios)
	return ratios, t1, t2
}
