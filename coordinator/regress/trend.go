package regress

import "math"

// lsqFit is a least-squares fit of y on a few columns.
type lsqFit struct {
	coef []float64
	inv  [][]float64 // (XᵀX)⁻¹
	rss  float64
}

// fitLSQ fits ys on the columns cols(i) (one row per point, at most a
// handful of columns) by least squares through the normal equations,
// solved by Gauss-Jordan elimination with partial pivoting. ok is false
// when XᵀX is singular (a column is a combination of the others).
func fitLSQ(n, k int, row func(i int, x []float64), ys []float64) (lsqFit, bool) {
	a := make([][]float64, k)
	for i := range a {
		a[i] = make([]float64, 2*k)
		a[i][k+i] = 1
	}
	v := make([]float64, k)
	x := make([]float64, k)
	for i := range n {
		row(i, x)
		for r := range k {
			v[r] += float64(x[r] * ys[i])
			for c := range k {
				a[r][c] += float64(x[r] * x[c])
			}
		}
	}
	scale := 0.0
	for r := range k {
		scale = math.Max(scale, math.Abs(a[r][r]))
	}
	for c := range k {
		p := c
		for r := c + 1; r < k; r++ {
			if math.Abs(a[r][c]) > math.Abs(a[p][c]) {
				p = r
			}
		}
		if !(math.Abs(a[p][c]) > 1e-12*scale) {
			return lsqFit{}, false
		}
		a[c], a[p] = a[p], a[c]
		d := a[c][c]
		for j := range a[c] {
			a[c][j] /= d
		}
		for r := range k {
			if r == c || a[r][c] == 0 {
				continue
			}
			f := a[r][c]
			for j := range a[r] {
				a[r][j] -= float64(f * a[c][j])
			}
		}
	}
	f := lsqFit{coef: make([]float64, k), inv: make([][]float64, k)}
	for r := range k {
		f.inv[r] = a[r][k:]
		for c := range k {
			f.coef[r] += float64(f.inv[r][c] * v[c])
		}
	}
	for i := range n {
		row(i, x)
		e := ys[i]
		for c := range k {
			e -= float64(f.coef[c] * x[c])
		}
		f.rss += float64(e * e)
	}
	return f, true
}

// curveMinPoints is the fewest points a drift check fits a quadratic
// trend to. With fewer, a bend and a step are nearly the same shape, so
// the check would only drop real steps (measured: short series of 12–20
// points, settled recall 79.0 → 75.0% with it), while a slow degradation
// needs many builds to bend.
const curveMinPoints = 30

// trendFit is the result of stepBeyondTrend and globalDrift.
type trendFit struct {
	// P is the two-sided p-value of the step once a linear trend is
	// allowed for (0: no evidence of drift, the fit is degenerate).
	P float64
	// PCurve is the same beyond a quadratic trend: an accelerating
	// degradation bends where a line cannot follow it (0 with fewer
	// than curveMinPoints points).
	PCurve float64
	// StepOverTrend is (RSS of a trend alone − RSS of a step alone)/s²:
	// how much better a step alone explains the points than a trend
	// alone (+Inf when the fit is degenerate); StepOverCurve the same
	// against a quadratic trend (+Inf with fewer than curveMinPoints
	// points).
	StepOverTrend, StepOverCurve float64
}

// noTrend is the trendFit of a degenerate fit: no evidence of drift.
var noTrend = trendFit{StepOverTrend: math.Inf(1), StepOverCurve: math.Inf(1)}

// stepBeyondTrend fits both segments by least squares with a step alone
// (y = a + c·[after]), a trend alone (a + b·t, and a + b·t + q·t²) and
// both (a + b·t + c·[after], and with q·t²), noise variance s2 on df
// degrees of freedom. Seq is the time axis t, so missing runs keep their
// place. Dropping c from a full model adds t_c²·s² to its RSS, dropping
// b adds t_b²·s², so a step alone beats a line alone by t_c² − t_b² in
// units of s².
func stepBeyondTrend(before, after []Point, s2, df float64) trendFit {
	pts := make([]Point, 0, len(before)+len(after))
	pts = append(append(pts, before...), after...)
	return globalDrift(pts, []int{len(before)}, s2, df)[0]
}

// globalDrift judges each boundary of b (sorted indices into pts, the
// first point of each new level) against a trend fitted across all of
// pts with every other boundary's step allowed for: the model is one
// level per segment plus a line (or a quadratic) in seq. On the whole
// window this is the drift check of Config.Once; on two segments (one
// boundary) it is stepBeyondTrend. A trend across the whole window is
// better determined than across one boundary's two segments, where it is
// nearly collinear with the step. It returns one trendFit per boundary
// (the quadratic terms only with at least curveMinPoints points).
func globalDrift(pts []Point, b []int, s2, df float64) []trendFit {
	n, k := len(pts), len(b)
	out := make([]trendFit, k)
	for j := range out {
		out[j] = noTrend
	}
	if n < 4 || s2 <= 0 || k == 0 {
		return out
	}
	lo, hi := float64(pts[0].Seq), float64(pts[n-1].Seq)
	if hi <= lo {
		return out
	}
	ys := values(pts)
	ts := make([]float64, n)
	for i, p := range pts {
		ts[i] = 2*(float64(p.Seq)-lo)/(hi-lo) - 1
	}
	// fit fits trend terms (0: none, 1: a line, 2: a quadratic) and the
	// step of every boundary except skip (-1: none skipped); it returns
	// the fit and the column of the first step.
	fit := func(trend, skip int) (lsqFit, int, bool) {
		cols := 1 + trend + k
		if skip >= 0 {
			cols--
		}
		f, ok := fitLSQ(n, cols, func(i int, x []float64) {
			x[0] = 1
			c := 1
			if trend >= 1 {
				x[c] = ts[i]
				c++
			}
			if trend >= 2 {
				x[c] = float64(ts[i]*ts[i]) - 1.0/3
				c++
			}
			for j, at := range b {
				if j == skip {
					continue
				}
				x[c] = 0
				if i >= at {
					x[c] = 1
				}
				c++
			}
		}, ys)
		return f, 1 + trend, ok
	}
	steps, _, ok0 := fit(0, -1)
	line, l0, ok1 := fit(1, -1)
	curveOK := n >= curveMinPoints
	curve, c0, ok2 := fit(2, -1)
	if !ok0 || !ok1 {
		return out
	}
	next := func(j int) int {
		if j+1 < k {
			return b[j+1]
		}
		return n
	}
	for j := range b {
		f := &out[j]
		tc := line.coef[l0+j] / math.Sqrt(s2*line.inv[l0+j][l0+j])
		f.P = studentTwoSided(tc, df)
		if lineWithout, _, ok := fit(1, j); ok {
			f.StepOverTrend = (lineWithout.rss - steps.rss) / s2
		}
		if !curveOK || !ok2 || 4*(next(j)-b[j]) > n {
			continue
		}
		// The quadratic stands for a slow degradation that accelerates
		// toward the window's end, where it reads as a step: only a step
		// with at most a quarter of the window after it is held against
		// it (a bend also fits part of a real step further back: a +5.2%
		// step at CV 3% with 22 of 57 points after, TestDetectLongSettledStep,
		// was then found in 42 instead of 46 of 50 series). Without the
		// step the quadratic must bend the step's way and, at the end,
		// move the step's way: a change that slows down is no drift that
		// explains a step.
		curveWithout, _, ok := fit(2, j)
		if c, b, q := steps.coef[1+j], curveWithout.coef[1], curveWithout.coef[2]; !ok || q*c <= 0 || (b+2*q)*c <= 0 {
			continue
		}
		f.PCurve = studentTwoSided(curve.coef[c0+j]/math.Sqrt(s2*curve.inv[c0+j][c0+j]), df)
		f.StepOverCurve = (curveWithout.rss - steps.rss) / s2
	}
	return out
}
