package store_test

import (
	"math"
	"testing"

	"github.com/lesfarm/lesfarm/coordinator/store"
)

// TestDownsampleSeriesFinite: builds whose means are ±1e308 (stored before
// ingest bounded values) downsample to finite points; the sum and the
// squares overflowed to +Inf, which no JSON encoder takes.
func TestDownsampleSeriesFinite(t *testing.T) {
	in := []store.SeriesWithPoints{{Points: []store.RegressPoint{
		{Seq: 1, Value: 1e308, Stddev: 1e308, N: 1}, {Seq: 2, Value: 1e308, Stddev: 1e308, N: 1},
		{Seq: 3, Value: -1e308, Stddev: 0, N: 1}, {Seq: 4, Value: 5, Stddev: 1, N: 1},
	}}}
	out := store.DownsampleSeries(in, 2)
	if len(out[0].Points) != 2 {
		t.Fatalf("points %+v", out[0].Points)
	}
	for _, p := range out[0].Points {
		if math.IsInf(p.Value, 0) || math.IsNaN(p.Value) || math.IsInf(p.Stddev, 0) || math.IsNaN(p.Stddev) {
			t.Fatalf("non-finite point %+v", p)
		}
	}
	if p := out[0].Points[0]; p.Value != 1e308 || math.Abs(p.Stddev-1e308) > 1e295 {
		t.Fatalf("first bucket %+v, want mean 1e308 and RMS 1e308", p)
	}
	if p := out[0].Points[1]; math.Abs(p.Value-(-1e308+5)/2) > 1e295 {
		t.Fatalf("second bucket %+v", p)
	}
}
