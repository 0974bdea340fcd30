package regress

import "math"

// A settled step's recall has two limits that no detector setting
// removes: where a faint step can be placed and whether it is
// significant at a level that keeps step-free series quiet. The placed
// evaluation measures both on the very series it scores (placedTruth
// describes how a series was drawn):
//
//   - ceiling: whether the best rule for "within one point" (the
//     Bayes rule: the window of three places with the most posterior
//     mass) places the step right, knowing everything but its place
//     (the levels before and after, the drift, the noise law and the
//     prior of the place). It needs no significance, so it bounds the
//     settled recall of any detector from above;
//   - oracle: a detector that knows the noise's standard deviation
//     (not the levels): it places the step by the same best rule under
//     a Gaussian model and raises it when the step's z with that
//     standard deviation, at the true place or one point either side,
//     passes the detector's own level for the series (the level of
//     testSplit with the window's length and the points after). It is
//     a reference for the Gaussian families (step, step-short,
//     step-long, step-on-drift without its drift, step-bimodal by its
//     variance); for heavy tails and outliers a mean-based test is not
//     the best one, and the ceiling is the bound to read.

// placedTruth is how a placed series was drawn: each point's level
// without the step (base 100 times the drift), the step's relative size
// with its sign, and the family's noise law at the CV.
type placedTruth struct {
	base  []float64
	rel   float64
	noise Noise
	cv    float64
}

// logDensity is the log density of the value x of a point at level
// under the generator's noise law (sample with DesignSeries: x =
// level·scale·(1 + b)).
func (tr placedTruth) logDensity(x, level float64) float64 {
	cv := tr.cv
	u := x/level - 1
	var d float64
	switch tr.noise {
	case NoiseBimodal:
		s := 0.45 * cv
		d = float64(0.5*gaussDensity(u-float64(0.9*cv), s)) + float64(0.5*gaussDensity(u+float64(0.9*cv), s))
	case NoiseHeavy:
		z := u / cv
		d = 2 / (math.Pi * math.Sqrt(3)) / ((1 + z*z/3) * (1 + z*z/3)) / cv
	case NoiseOutliers:
		// 5% of runs scaled by 1.15–1.4 (a quarter of them) or 0.6–0.85,
		// uniformly; their own noise smooths the bands' edges.
		r := x / level
		band := func(lo, hi float64) float64 {
			return (normalCDF((hi-r)/cv) - normalCDF((lo-r)/cv)) / (hi - lo)
		}
		d = float64(0.95*gaussDensity(u, cv)) + float64(0.05*(float64(0.25*band(1.15, 1.4))+float64(0.75*band(0.6, 0.85))))
	default:
		d = gaussDensity(u, cv)
	}
	return math.Log(max(d, math.SmallestNonzeroFloat64)) - math.Log(level)
}

// sd is the standard deviation of the family's noise in units of the
// level: the CV, √3 times it for Student's t with 3 degrees of freedom,
// √(0.9² + 0.45²) times it for the bimodal noise.
func (tr placedTruth) sd() float64 {
	switch tr.noise {
	case NoiseHeavy:
		return tr.cv * math.Sqrt(3)
	case NoiseBimodal:
		return tr.cv * math.Sqrt(0.9*0.9+0.45*0.45)
	}
	return tr.cv
}

// bestWindow returns, for weights w over the places lo..hi (w[k]), the
// place whose window k−tol..k+tol holds the most weight: the Bayes rule
// for "within tol points".
func bestWindow(w []float64, lo, hi, tol int) int {
	best, bestW := lo, -1.0
	for k := lo; k <= hi; k++ {
		s := 0.0
		for j := max(k-tol, lo); j <= min(k+tol, hi); j++ {
			s += w[j]
		}
		if s > bestW {
			best, bestW = k, s
		}
	}
	return best
}

// settledLimit says, for one settled step series, what limits its
// recall (see the comment at the top of this file).
type settledLimit struct {
	// Ceiling: the best rule knowing everything but the place puts the
	// step within the tolerance.
	Ceiling bool
	// Oracle: a detector knowing the noise's standard deviation finds
	// it there.
	Oracle bool
	// Significant: the detector's own test (testSplit's t-test on the
	// points kept after setting aside isolated bad runs, the whole
	// window's variance with this one boundary) passes its level at the
	// true place or within the tolerance of it. A step that fails it is
	// lost to the level, wherever the search looks.
	Significant bool
}

// settledLimits measures the limits of a settled step series pts whose
// step is at index at, drawn with the place's prior uniform over
// lo..hi, for a hit within tol points, at the detector setting det.
func settledLimits(pts []Point, tr placedTruth, at, lo, hi, tol int, det Config, prior NoisePrior) settledLimit {
	var lim settledLimit
	n := len(pts)
	// Log-likelihood of every place: points before it at their base
	// level, from it on at the stepped level.
	lb := make([]float64, n+1)
	la := make([]float64, n+1)
	for i, p := range pts {
		lb[i+1] = lb[i] + tr.logDensity(p.Value, tr.base[i])
		la[i+1] = la[i] + tr.logDensity(p.Value, tr.base[i]*(1+tr.rel))
	}
	w := make([]float64, n+1)
	top := math.Inf(-1)
	for k := lo; k <= hi; k++ {
		top = max(top, lb[k]+la[n]-la[k])
	}
	for k := lo; k <= hi; k++ {
		w[k] = math.Exp(lb[k] + la[n] - la[k] - top)
	}
	lim.Ceiling = abs(bestWindow(w, lo, hi, tol)-at) <= tol

	det = det.withDefaults()
	lim.Significant = significantNear(pts, at, tol, det, prior)

	// The σ-known oracle: the Gaussian posterior of the place with both
	// levels unknown (splitPosterior) under the same prior, and the
	// step's z with the known standard deviation.
	s := 100 * tr.sd()
	post, _ := splitPosterior(pts, 0, n, 1, s*s)
	for k := range post {
		if k < lo || k > hi {
			post[k] = 0
		}
	}
	if abs(bestWindow(post, lo, hi, tol)-at) > tol {
		return lim
	}
	level := onceLevel(det, n-at, n)
	for k := max(at-tol, 1); k <= min(at+tol, n-1); k++ {
		z := math.Abs(meanOf(pts[k:])-meanOf(pts[:k])) / (s * math.Sqrt(1/float64(k)+1/float64(n-k)))
		if normalTwoSided(z) < level {
			lim.Oracle = true
			break
		}
	}
	return lim
}

// onceLevel is testSplit's level in a series judged once (Config.Once)
// for a boundary with na points after it in a window of n points.
func onceLevel(det Config, na, n int) float64 {
	level := det.Alpha * alphaWeight(na, true)
	if na >= 4 && n > longWindow {
		level *= longWindow / float64(n)
	}
	return level
}

// significantNear reports whether testSplit's t-test passes its level
// for a boundary within tol points of at (an index into pts), on the
// points Detect keeps after setting aside isolated bad runs.
func significantNear(pts []Point, at, tol int, det Config, prior NoisePrior) bool {
	out := isolatedOutliers(pts, det.OutlierSigmas)
	kept := make([]Point, 0, len(pts))
	idx := make([]int, 0, len(pts)) // kept index of each original place
	for i, p := range pts {
		idx = append(idx, len(kept))
		if !out[i] {
			kept = append(kept, p)
		}
	}
	nv := noiseVar{floor: seriesNoiseVar(kept), n: len(kept)}
	for k := max(at-tol, 0); k <= min(at+tol, len(pts)-1); k++ {
		b := idx[k]
		if b < det.MinSegment || len(kept)-b < det.MinSegment {
			continue
		}
		nv.global, nv.df = segmentedVar(kept, []int{b})
		nv.global, nv.df = pooledVar(nv.global, nv.df, squaredLevel(kept), prior, float64(det.PoolDF))
		cp, _, _ := testSplit(kept[:b], kept[b:], det, nv)
		if cp.PValue < onceLevel(det, len(kept)-b, len(kept)) {
			return true
		}
	}
	return false
}

func gaussDensity(u, s float64) float64 {
	return math.Exp(-u*u/(2*s*s)) / (s * math.Sqrt(2*math.Pi))
}

func normalCDF(z float64) float64 { return float64(0.5 * math.Erfc(-z/math.Sqrt2)) }
