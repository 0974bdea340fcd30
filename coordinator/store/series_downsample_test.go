package store_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/lesfarm/lesfarm/coordinator/store"
)

func pts(seqs ...int64) []store.RegressPoint {
	var out []store.RegressPoint
	for _, q := range seqs {
		out = append(out, store.RegressPoint{Seq: q, Value: float64(q), Stddev: 1, N: 3, Build: fmt.Sprintf("b%d", q), RunKey: fmt.Sprint(100 + q)})
	}
	return out
}

func TestDownsampleSeries(t *testing.T) {
	seq := func(a, b int64) []int64 {
		var s []int64
		for q := a; q <= b; q++ {
			s = append(s, q)
		}
		return s
	}
	for _, tc := range []struct {
		name      string
		series    [][]int64
		max       int
		wantSeq   [][]int64 // each point's seq (the bucket's last build)
		wantFirst [][]int64 // each point's bucket start (nil: not downsampled)
	}{
		{"off", [][]int64{seq(1, 10)}, 0, [][]int64{seq(1, 10)}, nil},
		{"fits", [][]int64{seq(1, 10)}, 10, [][]int64{seq(1, 10)}, nil},
		{"halves", [][]int64{seq(1, 10)}, 5, [][]int64{{2, 4, 6, 8, 10}}, [][]int64{{1, 3, 5, 7, 9}}},
		{"uneven", [][]int64{seq(1, 10)}, 3, [][]int64{{3, 6, 10}}, [][]int64{{1, 4, 7}}},
		// Shared buckets: a series missing builds gets the same seqs, and
		// one with a build per bucket keeps its points in buckets of one.
		{"shared axis", [][]int64{seq(1, 8), {2, 3, 7}, {1, 3, 5, 7}}, 4,
			[][]int64{{2, 4, 6, 8}, {2, 4, 8}, {2, 4, 6, 8}},
			[][]int64{{1, 3, 5, 7}, {1, 3, 7}, {1, 3, 5, 7}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var in []store.SeriesWithPoints
			for i, s := range tc.series {
				in = append(in, store.SeriesWithPoints{RegressSeries: store.RegressSeries{ID: int64(i + 1)}, Points: pts(s...)})
			}
			out := store.DownsampleSeries(in, tc.max)
			for i, s := range out {
				var got, first []int64
				for _, p := range s.Points {
					got = append(got, p.Seq)
					if p.Bucket != nil {
						first = append(first, p.Bucket.SeqFirst)
					}
				}
				if fmt.Sprint(got) != fmt.Sprint(tc.wantSeq[i]) {
					t.Errorf("series %d: seqs %v, want %v", i, got, tc.wantSeq[i])
				}
				var wantFirst []int64
				if tc.wantFirst != nil {
					wantFirst = tc.wantFirst[i]
				}
				if fmt.Sprint(first) != fmt.Sprint(wantFirst) {
					t.Errorf("series %d: bucket starts %v, want %v", i, first, wantFirst)
				}
			}
		})
	}

	// A bucket's statistics: builds 3, 4 with means 3, 4 and stddev 1 each.
	out := store.DownsampleSeries([]store.SeriesWithPoints{{Points: pts(1, 2, 3, 4)}}, 2)
	p := out[0].Points[1]
	if p.Value != 3.5 || p.Stddev != 1 || p.N != 6 || p.Build != "b4" || p.RunKey != "104" ||
		p.Bucket.Builds != 2 || p.Bucket.Min != 3 || p.Bucket.Max != 4 || p.Bucket.SeqFirst != 3 {
		t.Errorf("bucket of builds 3–4: %+v %+v", p, *p.Bucket)
	}
	// The stddev is the RMS of the builds' stddevs.
	in := []store.SeriesWithPoints{{Points: []store.RegressPoint{{Seq: 1, Value: 1, Stddev: 3}, {Seq: 2, Value: 1, Stddev: 4}, {Seq: 3, Value: 1}}}}
	if sd := store.DownsampleSeries(in, 1)[0].Points[0].Stddev; math.Abs(sd-math.Sqrt(25.0/3)) > 1e-12 {
		t.Errorf("bucket stddev %v, want sqrt(25/3)", sd)
	}
}
