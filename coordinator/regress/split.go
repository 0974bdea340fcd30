package regress

import "math"

// testSplit tests whether before and after differ. It returns the change
// point fields, whether it passes every criterion, and a badness score
// (larger is worse) used to pick which failing boundary to drop first.
//
// The test is a t-test on random-effects weighted segment means: each
// point's variance is τ² (between-run variance, estimated from the
// residuals of both segments) plus its own within-run variance s²/n when
// its repetitions are known. Without repetitions it reduces to Student's
// pooled t-test. The pooled residual variance is deliberate: with two
// points after a change Welch's per-segment variance has one degree of
// freedom and no power, while run-to-run noise is a property of the
// device and benchmark, not of the segment.
func testSplit(before, after []Point, cfg Config, nv noiseVar) (ChangePoint, bool, float64) {
	nb, na := len(before), len(after)
	cp := ChangePoint{BeforeN: nb, AfterN: na, PValue: 1, MWPValue: 1}
	if nb < cfg.MinSegment || na < cfg.MinSegment || nb+na < 3 {
		return cp, false, math.Inf(1)
	}
	mb0, ma0 := meanOf(before), meanOf(after)
	ss := 0.0
	for _, p := range before {
		ss += float64((p.Value - mb0) * (p.Value - mb0))
	}
	for _, p := range after {
		ss += float64((p.Value - ma0) * (p.Value - ma0))
	}
	df := float64(nb + na - 2)
	s2 := ss / max(df, 1)
	switch {
	case nv.global > 0 && nv.df > 0:
		// Residual variance of the whole window under the current
		// segmentation: many more degrees of freedom than the two
		// segments alone.
		s2, df = nv.global, nv.df
	case nv.floor > s2:
		// The two segments are less noisy than the series as a whole:
		// likely selection (the split was chosen to fit them), so use the
		// robust whole-series estimate.
		s2 = nv.floor
	}
	// Within-run variances of the mean, where repetitions are known.
	var eSum float64
	var eN int
	for _, seg := range [][]Point{before, after} {
		for _, p := range seg {
			if e, ok := withinVar(p); ok {
				eSum += e
				eN++
			}
		}
	}
	eMean := 0.0
	if eN > 0 {
		eMean = eSum / float64(eN)
	}
	// A standard deviation from a few repetitions is itself noisy (from
	// 5 repetitions it is off by a factor of 2 one time in ten); weighting
	// points by it unshrunk overweights points whose repetitions happened
	// to agree, and the test's variance ignores that. Shrink each point's
	// within-run variance toward the series' average, with the average
	// worth shrinkDF degrees of freedom.
	within := func(p Point) float64 {
		e, ok := withinVar(p)
		if !ok {
			return eMean
		}
		df := float64(p.N - 1)
		return (float64(shrinkDF*eMean) + float64(df*e)) / (shrinkDF + df)
	}
	tau2 := s2 - eMean
	// Keep at least a quarter of the observed variance as between-run
	// variance: repetitions within one run understate run-to-run noise.
	tau2 = max(tau2, 0.25*s2)
	scale := math.Max(math.Abs(mb0), math.Abs(ma0))
	floor := (1e-9 * scale) * (1e-9 * scale)
	wmean := func(seg []Point) (m, v float64) {
		var sw, swx float64
		for _, p := range seg {
			e := within(p)
			w := 1 / max(tau2+e, floor, math.SmallestNonzeroFloat64)
			sw += w
			swx += float64(w * p.Value)
		}
		return swx / sw, 1 / sw
	}
	mb, vb := wmean(before)
	ma, va := wmean(after)
	cp.BeforeMean, cp.AfterMean = mb, ma
	if mb != 0 {
		cp.RelativeChange = (ma - mb) / math.Abs(mb)
	} else if ma != mb {
		cp.RelativeChange = math.Copysign(math.Inf(1), ma-mb)
	}
	if se := math.Sqrt(vb + va); se > 0 {
		cp.PValue = studentTwoSided((ma-mb)/se, df)
	} else if ma != mb {
		cp.PValue = 0
	}
	if cfg.MWAlpha > 0 {
		cp.MWPValue = mannWhitney(values(before), values(after))
	} else {
		cp.MWPValue = 0
	}
	// A short new segment must be internally consistent: two or three
	// results at a new level agree within the noise, while two unrelated
	// bad runs in a row (or one bad run and a normal one) do not.
	if na <= 3 && cfg.OutlierSigmas > 0 && nv.floor > 0 {
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, p := range after {
			lo, hi = math.Min(lo, p.Value), math.Max(hi, p.Value)
		}
		if hi-lo > cfg.OutlierSigmas*math.Sqrt(2*nv.floor) {
			return cp, false, math.Inf(1)
		}
	}
	alpha := cfg.Alpha
	if !cfg.FixedAlpha {
		alpha *= alphaWeight(na, cfg.Once)
	}
	if cfg.Once && na >= 4 && nv.n > longWindow {
		alpha *= longWindow / float64(nv.n)
	}
	ok := cp.PValue < alpha && math.Abs(cp.RelativeChange) >= cfg.MinEffect &&
		(cfg.MWAlpha <= 0 || cp.MWPValue < cfg.MWAlpha)
	score := cp.PValue / alpha
	if cfg.MinEffect > 0 {
		score = max(score, cfg.MinEffect/max(math.Abs(cp.RelativeChange), 1e-12))
	}
	if cfg.RecentShiftAlpha > 0 && na <= 4 {
		// The minimum effect as the null hypothesis, one-sided in the
		// observed direction.
		lvl := cfg.RecentShiftAlpha * alphaWeight(na, cfg.Once)
		ps := 1.0
		if se := math.Sqrt(vb + va); se > 0 {
			if z := (math.Abs(ma-mb) - float64(cfg.MinEffect*math.Abs(mb))) / se; z > 0 {
				ps = studentTwoSided(z, df) / 2
			}
		}
		ok = ps < lvl && (cfg.MWAlpha <= 0 || cp.MWPValue < cfg.MWAlpha)
		score = ps / lvl
	}
	// Drift: a slow trend across both segments also makes their means
	// differ. Keep the change if a step is still significant on top of a
	// linear trend fitted to both segments together or, for a series
	// judged once (cfg.Once), if a step alone explains the data clearly
	// better than a trend alone does (driftMargin).
	if ok && cfg.DriftAlpha > 0 {
		if d := stepBeyondTrend(before, after, s2, df); !driftKeeps(d, cfg, cp.RelativeChange) {
			ok, score = false, max(score, max(d.P, d.PCurve)/cfg.DriftAlpha)
		}
	}
	return cp, ok, score
}

// driftKeeps is the drift check's verdict on a step of relative size
// rel with the trend fits d: the step is significant beyond a trend at
// DriftAlpha (onceDriftShare·DriftAlpha in a series judged once) or, in
// a series judged once (Config.Once), a step alone fits
// clearly better than a trend alone (driftMargin) and is at least
// driftRescueEffect times the minimum effect. Judged once, the trend is
// also a quadratic one when the points are many (curveMinPoints): an
// accelerating degradation is not a step either. The monitor keeps the
// line-only test.
func driftKeeps(d trendFit, cfg Config, rel float64) bool {
	if !cfg.Once {
		return d.P < cfg.DriftAlpha
	}
	if max(d.P, d.PCurve) < cfg.DriftAlpha*onceDriftShare {
		return true
	}
	return min(d.StepOverTrend, d.StepOverCurve) >= driftMargin && math.Abs(rel) >= driftRescueEffect*cfg.MinEffect
}

// driftRescueEffect: a step that is not significant beyond a trend is
// kept for fitting better than a trend alone only when it is at least
// this many times the minimum effect. A slow drift cut in the middle
// reads as a step of half its total, and with a few percent over a
// series at a CV of 2% a line and a small step fit about equally well
// (the margin passes by chance); the steps the goals are about are
// larger. Measured (EvaluatePlaced, tuning run, 100 series per cell,
// goal region; 1 is the margin alone): 1.5 moves false alerts 8.6 →
// 7.3% of alerts and null drift-linear series alerting 6.6 → 3.8% at
// the same settled recall (89.9%); 2 then 7.9 → 7.1% and 5.2 → 4.6%
// for settled recall 90.8 → 90.5%.
const driftRescueEffect = 2

// onceDriftShare scales DriftAlpha for the significance of a step beyond
// a trend in a series judged once (Config.Once). The step's place is
// chosen where it fits best, so beyond a trend it is significant at 0.01
// by chance far more often than 1 time in 100; a real step that fails
// the stricter level is still kept when it fits clearly better than a
// trend (driftMargin, driftRescueEffect). Measured as above: 0.2 moves
// false alerts 7.1 → 6.3%, null drift-linear series alerting 4.6 →
// 3.4%, settled recall 90.5 → 90.0%, fresh 69.2 → 68.7%.
const onceDriftShare = 0.2

// driftMargin is how much better, in residual sum of squares over the
// noise variance, a step alone must fit than a trend alone for the drift
// check to keep a change whose step is not significant beyond the trend,
// in a series judged once (Config.Once). A step in the middle of a long
// series is nearly collinear with a trend (beyond it the step loses half
// its t), so the beyond-trend test alone dropped clear, long-settled
// steps: a 5% step at CV 3% with 20 points on each side has t ≈ 5 but
// only ≈ 2.6 beyond a trend. A slow drift cut into a step, by contrast,
// fits a trend about as well as a step. 2 is the AIC's price of one
// parameter. Measured (EvaluatePlaced, goal region, 200 series per cell):
// settled recall 93.4 → 95.4%, false alerts on null series 2.0 → 3.8%.
// The monitor does not use it: there it bought 1 point of settled recall
// (93.2 → 94.2% raised on some night) for 1–2 points of false alerts in
// the online harness (n1, all noise: 7.8 → 9.4% of alerts).
const driftMargin = 2

// longWindow: in a series judged once (Config.Once) of n points, more
// than longWindow, a boundary with 4 or more points after it is tested
// at Alpha·alphaWeight·longWindow/n. The search tries about one place
// per point and keeps the best, so the chance that some place of a step
// free series passes a fixed level grows with n; spending the level over
// the places keeps that chance about constant, and a settled step has
// points to spare (a fresh one, with 2 or 3 points after, keeps the full
// level: there the search has only the last few places). Measured
// (EvaluatePlaced, tuning run, 100 series per cell, goal region, with
// the rest of this detector): false alerts 6.2% of alerts with 60 (a
// level for long series only), 5.3% with 30, 4.2% with 10, 3.8% with 8;
// settled recall 90.1, 90.0, 89.1 and 89.0%; fresh 68.8–68.9%. 10 keeps
// the false-alert bound of the tuning run (4.6%) below 5% with some room
// for the held-out run's other lengths; 8 would also miss the +5.2% step
// of TestDetectLongSettledStep in 6 of its 50 series (10: 5; 60: 4).
const longWindow = 10

// shrinkDF is the weight, in degrees of freedom, of the series' average
// within-run variance when shrinking a point's own (see testSplit).
const shrinkDF = 8

// alphaWeight spends the false-alert budget over the life of a change
// point. The monitor re-tests every position after each new result, so a
// position sees a test with 2, 3, 4, ... results after it; the goals need
// power once 4 results exist (recall ≥ 95%) and less with 2 (≥ 60%). So
// the level is Alpha/2 at na = 2, Alpha at 3 and 2·Alpha at 4, and beyond
// that, sequentially (the default), 2·Alpha·(4/na)⁴ — old positions,
// re-tested every night, would otherwise accumulate false alerts — but
// never below Alpha·settledFloor. Without the floor the critical t grew as
// fast as a real step's t (6.5e-7 at 22 points after): a +5.2% step at
// CV 3% with 35 points before and 22 after (t ≈ 6) was never raised.
//
// once (Config.Once) is for a series judged as a whole a single time
// (regress detect, the placed-step evaluation): no re-testing, so no
// spending over nights; the level is 2·Alpha at every na. (It used to
// keep Alpha/2 at na = 2 and Alpha at 3, the monitor's spending, which a
// single look does not need: measured on EvaluatePlaced's tuning run,
// 100 series per cell, goal region, fresh recall 63.0 → 69.2% and null
// series alerting 2.2 → 2.2%.)
func alphaWeight(na int, once bool) float64 {
	switch {
	case once:
		return 2
	case na <= 2:
		return 0.5
	case na == 3:
		return 1
	case na == 4 || once:
		return 2
	}
	r := 4 / float64(na)
	return max(2*r*r*r*r, settledFloor)
}

// settledFloor is the lowest level, as a multiple of Alpha, of the
// sequential schedule (alphaWeight), reached 10 points after a change.
// Measured (online harness, goal region, n1, 100 histories per cell)
// against no floor: false alerts 4.7 → 4.9% of alerts with gaussian noise
// (2.2 → 2.0 per 100 null histories), recall@8 87.1 → 87.7% over all
// noise kinds; higher floors cost more (0.2: 6.7% false alerts).
const settledFloor = 0.05
