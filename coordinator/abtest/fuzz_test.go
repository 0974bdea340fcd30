package abtest

import (
	"encoding/binary"
	"math"
	"testing"
)

// FuzzCompare: any two samples (NaN, ±Inf, ties, negatives, empty) give
// p-values in [0, 1], a known verdict, an interval around the change, and
// tests symmetric in their sides.
func FuzzCompare(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, uint8(8))
	f.Add([]byte{}, uint8(0))
	f.Add([]byte{0xff, 0xf0, 0, 0, 0, 0, 0, 0, 0x7f, 0xf0, 0, 0, 0, 0, 0, 1}, uint8(8))
	f.Fuzz(func(t *testing.T, raw []byte, split uint8) {
		var vals []float64
		for len(raw) >= 8 && len(vals) < 200 {
			vals = append(vals, math.Float64frombits(binary.LittleEndian.Uint64(raw)))
			raw = raw[8:]
		}
		for _, b := range raw { // small integers: many ties
			vals = append(vals, float64(b%7))
		}
		k := int(split) % (len(vals) + 1)
		a, b := vals[:k], vals[k:]
		c := Compare(a, b, Options{})
		for _, p := range []float64{c.P, c.PKS, c.PMWU, c.SameThreshold} {
			if !(p >= 0 && p <= 1) {
				t.Fatalf("p-value %v outside [0, 1]: %+v", p, c)
			}
		}
		switch c.Verdict {
		case Same, Different, Unknown:
		default:
			t.Fatalf("verdict %q", c.Verdict)
		}
		if s := c.Shift; !math.IsNaN(s.Change) && !math.IsInf(s.Change, 0) && !(s.Low <= s.Change && s.Change <= s.High) {
			t.Fatalf("change %v outside its interval [%v, %v]", s.Change, s.Low, s.High)
		}
		fa, fb := finite(a), finite(b)
		_, p1 := MannWhitney(fa, fb)
		_, p2 := MannWhitney(fb, fa)
		_, k1 := KolmogorovSmirnov(fa, fb)
		_, k2 := KolmogorovSmirnov(fb, fa)
		if math.Abs(p1-p2) > 1e-9 || math.Abs(k1-k2) > 1e-9 {
			t.Fatalf("asymmetric: MWU %v vs %v, KS %v vs %v", p1, p2, k1, k2)
		}
	})
}
