package bench

import (
	"math"
	"testing"
)

func TestPairedRatio(t *testing.T) {
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }
	for _, tc := range []struct {
		name         string
		in           []float64
		mean, lo, hi float64
	}{
		{"empty", nil, 0, 0, 0},
		{"one", []float64{1.2}, 1.2, 1.2, 1.2},
		{"constant", []float64{0.9, 0.9, 0.9}, 0.9, 0.9, 0.9},
		// logs 0 and ln 4: mean ln 2, sd ln 4/√2, half-width 12.706·(ln 4/√2)/√2 = 12.706·ln 2
		{"two", []float64{1, 4}, 2, 2 * math.Exp(-12.706*math.Ln2), 2 * math.Exp(12.706*math.Ln2)},
		{"ignores non-positive", []float64{0, -1, 1.5}, 1.5, 1.5, 1.5},
	} {
		m, lo, hi := pairedRatio(tc.in)
		if !near(m, tc.mean) || !near(lo, tc.lo) || !near(hi, tc.hi) {
			t.Errorf("%s: pairedRatio(%v) = %v [%v, %v], want %v [%v, %v]", tc.name, tc.in, m, lo, hi, tc.mean, tc.lo, tc.hi)
		}
	}
	if q := tQuantile975(1000); math.Abs(q-1.962) > 1e-3 {
		t.Errorf("t(1000) 97.5%% = %v, want 1.962", q)
	}
	if tQuantile975(30) <= tQuantile975(31) || tQuantile975(31) <= 1.96 {
		t.Errorf("t quantiles not decreasing toward 1.96 past the table: %v, %v", tQuantile975(30), tQuantile975(31))
	}
}
