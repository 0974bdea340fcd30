package expert

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/runtime/moe"
)

// BenchmarkNaivePages measures the naive mode's host cost per page: one
// op is one Use of 4 random experts of 16 on an unpacked model whose
// cache holds a fifth of the experts, so most pages are read, inserted
// and evicted, with the page-cache read-ahead of 8 MiB this VM's disk has.
// host-ns/page is the time outside the reads (the store's own page
// bookkeeping, the copy into the expert buffer) per page read.
func BenchmarkNaivePages(b *testing.B) {
	for _, direct := range []bool{false, true} {
		name := "page-cache"
		if direct {
			name = "direct"
		}
		b.Run(name, func(b *testing.B) { benchNaive(b, direct) })
	}
}

func benchNaive(b *testing.B, direct bool) {
	m := newTestModel(b, 2, 16, 256, 512, false) // 512 KiB per part, 1.5 MiB per expert
	s, err := New(m.path, m.layout, m.shapes, Options{Mode: Naive, Budget: 2 * 16 * m.expertBytes() / 5, Direct: direct})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	r := rand.New(rand.NewPCG(1, 2))
	ctx := context.Background()
	fn := func(int, moe.Weights) error { return nil }
	before := s.Meter().Stats()
	b.ReportAllocs()
	for b.Loop() {
		l := r.IntN(2)
		es := r.Perm(16)[:4]
		if err := s.Use(ctx, l, es, fn); err != nil {
			b.Fatal(err)
		}
	}
	el := b.Elapsed()
	st := s.Meter().Stats().Sub(before)
	pages := float64(st.BytesRead) / 4096
	b.ReportMetric(pages/float64(b.N), "pages/op")
	b.ReportMetric(float64(st.Stall.Nanoseconds())/float64(b.N), "stall-ns/op")
	// The store's own time beside its reads, per page read.
	b.ReportMetric(float64((el-st.Stall).Nanoseconds())/pages, "host-ns/page")
}

// TestMeasurePageCost: the page cost is measured, positive and plausible
// (well under the 100 µs a profile may declare).
func TestMeasurePageCost(t *testing.T) {
	if d := MeasurePageCost(); d <= 0 || d > 100*time.Microsecond {
		t.Fatalf("MeasurePageCost = %v", d)
	}
}
