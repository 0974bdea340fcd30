package regress

import "math"

// noiseVar carries whole-series noise estimates into testSplit.
type noiseVar struct {
	floor  float64 // robust whole-series variance, a lower bound for the local estimate
	global float64 // residual variance under the current segmentation (0: unused)
	df     float64 // its degrees of freedom
	n      int     // points in the window
}

// segmentedVar is the residual variance of pts around the means of the
// segments delimited by boundaries b, and its degrees of freedom.
func segmentedVar(pts []Point, b []int) (float64, float64) {
	ss, lo := 0.0, 0
	for i := 0; i <= len(b); i++ {
		hi := len(pts)
		if i < len(b) {
			hi = b[i]
		}
		m := meanOf(pts[lo:hi])
		for _, p := range pts[lo:hi] {
			ss += float64((p.Value - m) * (p.Value - m))
		}
		lo = hi
	}
	df := float64(len(pts) - len(b) - 1)
	if df < 1 {
		return 0, 0
	}
	return ss / df, df
}

// seriesNoiseVar is a robust estimate of the run-to-run variance of the
// whole series (from first differences, so steps barely move it).
func seriesNoiseVar(pts []Point) float64 {
	s := robustSigma(values(pts))
	return s * s
}

// withinVar returns the variance of a point's mean from its repetitions.
func withinVar(p Point) (float64, bool) {
	if p.N >= 2 && p.Stddev > 0 && !math.IsInf(p.Stddev, 0) {
		return p.Stddev * p.Stddev / float64(p.N), true
	}
	return 0, false
}

func meanOf(ps []Point) float64 {
	s := 0.0
	for _, p := range ps {
		s += p.Value
	}
	return s / float64(len(ps))
}

func values(ps []Point) []float64 {
	v := make([]float64, len(ps))
	for i, p := range ps {
		v[i] = p.Value
	}
	return v
}
