package abtest

import (
	"math"
	"slices"
)

// Shift is the Hodges–Lehmann estimate of how much b moved from a, as a
// relative change (0.05 is 5% higher), with its confidence interval.
type Shift struct {
	Change float64 `json:"change"`
	Low    float64 `json:"low"`
	High   float64 `json:"high"`
	// Level is the interval's confidence, e.g. 0.95.
	Level float64 `json:"level"`
}

// HodgesLehmann returns the median of the n·m pairwise differences
// log b_j − log a_i and the distribution-free interval around it whose
// ends are order statistics chosen from the Mann–Whitney distribution
// (normal approximation) at the given level, all turned into relative
// changes exp(x) − 1. When a value is not positive it uses differences
// b_j − a_i relative to a's median instead. Empty sides give a zero
// shift.
func HodgesLehmann(a, b []float64, level float64) Shift {
	n, m := len(a), len(b)
	s := Shift{Level: level}
	if n == 0 || m == 0 {
		return s
	}
	logs := allPositive(a) && allPositive(b)
	scale := 1.0
	if !logs {
		scale = math.Abs(median(a))
		if scale == 0 {
			scale = 1
		}
	}
	diffs := make([]float64, 0, n*m)
	for _, y := range b {
		for _, x := range a {
			if logs {
				diffs = append(diffs, math.Log(y)-math.Log(x))
			} else {
				diffs = append(diffs, (y-x)/scale)
			}
		}
	}
	slices.Sort(diffs)
	K := len(diffs)
	nm := float64(K)
	z := normalQuantile(1 - float64((1-level)/2))
	c := int(math.Floor(float64(nm/2) - float64(z*math.Sqrt(nm*float64(n+m+1)/12))))
	c = max(c, 0)
	lo, hi := diffs[c], diffs[K-1-c]
	est := median(diffs)
	if logs {
		s.Change, s.Low, s.High = math.Expm1(est), math.Expm1(lo), math.Expm1(hi)
	} else {
		s.Change, s.Low, s.High = est, lo, hi
	}
	return s
}

func allPositive(v []float64) bool {
	for _, x := range v {
		if !(x > 0) || math.IsInf(x, 1) {
			return false
		}
	}
	return true
}

// median of v (sorted or not); 0 for an empty slice.
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := v
	if !slices.IsSorted(v) {
		s = slices.Clone(v)
		slices.Sort(s)
	}
	k := len(s) / 2
	if len(s)%2 == 1 {
		return s[k]
	}
	return float64(s[k-1]/2) + float64(s[k]/2) // no overflow near MaxFloat64
}
