package regress

import (
	"cmp"
	"fmt"
	"math"
	"slices"
)

// Point is one result in a series: the mean of a run's repetitions, with
// their standard deviation and count when known (Stddev 0 or N 0 means
// unknown; the detector then treats the point like an average one).
type Point struct {
	Seq    int64   `json:"seq"` // build sequence or time; points are ordered by it
	Value  float64 `json:"value"`
	Stddev float64 `json:"stddev,omitempty"`
	N      int     `json:"n,omitempty"`
}

// Method selects the change-point search.
type Method string

// Change-point search methods.
const (
	// MethodPELT is pruned exact linear time segmentation with a Gaussian
	// mean-change cost and a BIC-like penalty scaled by a robust noise
	// estimate. It is the default: in the evaluation harness it has 1–2
	// points more recall than E-divisive for about 1 point more false
	// alerts (goal region). It is not the faster one: BenchmarkDetect (a
	// 5% step at CV 3%, 5 repetitions; best of 2 on a loaded 2-core
	// machine) gives 26 µs against 22 µs at 48 points and 112 µs against
	// 67 µs at 120 points, the default window. Either is small next to
	// the database round trips.
	MethodPELT Method = "pelt"
	// MethodEDivisive is E-divisive means (Matteson and James) with α = 1,
	// bisecting recursively; each split is kept only if the confirmation
	// test passes (as Hunter/Otava do), so no permutations are needed.
	MethodEDivisive Method = "edivisive"
)

// DefaultAlpha is the default significance level, the level of a
// boundary with 3 points after it (alphaWeight scales it by the number of
// points after). The detector runs after every result and tests every
// candidate position, so a series sees dozens of tests per month:
// measured by the evaluation harness (goal region, gaussian noise, 500
// histories per cell, one repetition per result) it gives about 2 false
// alerts per 100 null histories of ~38 runs and 5.4% false alerts among
// all alerts, against 30–50 per 100 histories at 0.01.
const DefaultAlpha = 0.0003

// DefaultOutlierSigmas is the default Config.OutlierSigmas. Setting aside
// points beyond 4 robust σ also trims the tails of plain gaussian noise
// (a point 2.8σ out is often 4σ from both neighbours), which lowers the
// noise estimate and so raises false alerts: measured by the harness
// (goal region, 300 histories, one repetition per result), 5 instead of
// 4 gives 4.6% instead of 5.5% false alerts with gaussian noise and 7.6%
// instead of 8.0% over all noise kinds, recall@4 within 0.3 points.
const DefaultOutlierSigmas = 5

// Config tunes the detector. The zero value is the default configuration;
// fields left zero take the documented defaults in Detect.
type Config struct {
	Method Method `json:"method"`
	// Alpha is the significance level of the t-test between adjacent
	// segments (default DefaultAlpha). It is small because the detector
	// runs after every result and tests every candidate position: see
	// DefaultAlpha.
	Alpha float64 `json:"alpha"`
	// MWAlpha is the significance level of the Mann-Whitney test that must
	// also pass, making confirmation robust to outliers (default 0.05;
	// negative disables the test).
	MWAlpha float64 `json:"mw_alpha"`
	// MinEffect is the minimum relative change |after-before|/|before|
	// (default 0.02, i.e. 2%).
	MinEffect float64 `json:"min_effect"`
	// MinSegment is the minimum number of points on each side of a change
	// point (default 2: a nightly suite can alert after two nights).
	MinSegment int `json:"min_segment"`
	// Penalty scales PELT's penalty, Penalty·σ̂²·ln(n) (default 1). PELT
	// only proposes candidates; the confirmation test decides.
	Penalty float64 `json:"penalty"`
	// Window is the number of most recent points considered (default 120).
	Window int `json:"window"`
	// OutlierSigmas: interior points farther than this many robust
	// standard deviations from both neighbours (which agree) are ignored
	// as isolated outliers (default DefaultOutlierSigmas; negative
	// disables).
	OutlierSigmas float64 `json:"outlier_sigmas"`
	// FixedAlpha tests every boundary at Alpha. By default the level
	// depends on the number na of points after the boundary: Alpha/2 at
	// na = 2, Alpha at 3, 2·Alpha at 4 and, beyond, 2·Alpha·(4/na)⁴ but
	// at least 0.05·Alpha (see alphaWeight).
	FixedAlpha bool `json:"fixed_alpha"`
	// Once says the series is judged once, as a whole, rather than
	// re-tested after every new result as the coordinator's monitor does:
	// the level is then 2·Alpha at every number of points after a change
	// (Alpha·2·10/n from 4 points after in a window of n > 10 points,
	// longWindow), since no false-alert budget is spent over repeated
	// looks (see alphaWeight), and the drift check is judged on the
	// whole window with a quadratic trend too (globalDrift, driftKeeps).
	// regress detect sets it unless --sequential is given.
	Once bool `json:"once"`

	// DriftAlpha is the level of the drift check: a change is kept only if
	// a step is still significant at this level on top of a linear trend
	// fitted across both segments, or (Once, at onceDriftShare of this
	// level, also beyond a quadratic trend and on the whole window) a step
	// alone fits clearly better than a trend alone (driftMargin,
	// driftRescueEffect) (default 0.01; negative disables).
	// It is loose because the change already passed the step test; a slow
	// drift explained by the trend then no longer reads as a step.
	DriftAlpha float64 `json:"drift_alpha"`
	// RecentShiftAlpha, when positive, judges a boundary with at most 4
	// points after it by a one-sided test of the minimum effect as the
	// null hypothesis, |after − before| > MinEffect·|before|, at level
	// RecentShiftAlpha·alphaWeight(na), instead of the two-sided test at
	// Alpha·alphaWeight(na) plus the minimum effect (default 0: off).
	// It is stricter where noise is small next to MinEffect and looser
	// where it is large. Measured (goal region, 300 histories, at 0.015):
	// with 5 repetitions per result and CV per repetition, recall@4 95.6
	// → 96.2% and false alerts 1.9 → 1.8% (all noise: 94.7 → 95.1%,
	// 3.7 → 3.3%); without repetitions recall@4 84.4 → 86.4% but false
	// alerts 4.6 → 6.7%. Over the whole grid it is worse: at CV 4–5% it
	// is looser than the default test, and null histories get 9.2
	// instead of 3.8 false alerts per 100 (without repetitions), so it is
	// off by default. See docs/regressions.md.
	RecentShiftAlpha float64 `json:"recent_shift_alpha"`
	// MinLocationMass withholds a confirmed change whose place is too
	// uncertain: the posterior mass of its location within one point of
	// the estimate (see locationRange) must reach it (default 0: off).
	// A change placed more than one build off names the wrong build, but
	// withholding it also withholds a real change whose build is merely
	// uncertain: measured (EvaluatePlaced, tuning run, 60 series per
	// cell, goal region over every family), 0.5 moves settled recall
	// 90.3 → 89.9%, fresh 63.2 → 63.0%, detected steps placed within one
	// point 96.6 → 97.0% and false alerts 12.3 → 10.6% of alerts; 0.7
	// gives 87.8%, 62.4%, 97.9% and 7.5%. It is off by default because
	// it drops clear steps whose place is uncertain (a +5.2% step at CV
	// 3%, 22 points after: 46 → 43 of 50 found).
	MinLocationMass float64 `json:"min_location_mass"`
	// PoolDF is the most degrees of freedom a noise level pooled from
	// sibling series (DetectPooled) weighs in a window's variance
	// (default DefaultPoolDF; negative: the prior is ignored).
	PoolDF int `json:"pool_df"`
}

func (c Config) withDefaults() Config {
	c.Method = cmp.Or(c.Method, MethodPELT)
	c.Alpha = cmp.Or(c.Alpha, DefaultAlpha)
	c.MWAlpha = cmp.Or(c.MWAlpha, 0.05)
	c.MinEffect = cmp.Or(c.MinEffect, 0.02)
	c.MinSegment = cmp.Or(c.MinSegment, 2)
	c.Penalty = cmp.Or(c.Penalty, 1)
	c.Window = cmp.Or(c.Window, 120)
	c.OutlierSigmas = cmp.Or(c.OutlierSigmas, DefaultOutlierSigmas)
	c.DriftAlpha = cmp.Or(c.DriftAlpha, 0.01)
	c.PoolDF = cmp.Or(c.PoolDF, DefaultPoolDF)
	return c
}

// Validate reports the first invalid field, as a one-line error.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.Method != MethodPELT && c.Method != MethodEDivisive:
		return fmt.Errorf("detector method %q: want pelt or edivisive", c.Method)
	case !(c.Alpha > 0 && c.Alpha < 1):
		return fmt.Errorf("detector alpha %v: want 0 < alpha < 1", c.Alpha)
	case c.MWAlpha >= 1:
		return fmt.Errorf("detector mw_alpha %v: want < 1 (negative disables)", c.MWAlpha)
	case c.MinEffect < 0 || math.IsNaN(c.MinEffect):
		return fmt.Errorf("detector min_effect %v: want >= 0", c.MinEffect)
	case c.MinSegment < 1:
		return fmt.Errorf("detector min_segment %d: want >= 1", c.MinSegment)
	case c.Penalty <= 0:
		return fmt.Errorf("detector penalty %v: want > 0", c.Penalty)
	case c.DriftAlpha >= 1 || math.IsNaN(c.DriftAlpha):
		return fmt.Errorf("detector drift_alpha %v: want < 1 (negative disables)", c.DriftAlpha)
	case c.RecentShiftAlpha < 0 || c.RecentShiftAlpha >= 1 || math.IsNaN(c.RecentShiftAlpha):
		return fmt.Errorf("detector recent_shift_alpha %v: want 0 <= value < 1 (0 disables)", c.RecentShiftAlpha)
	case c.MinLocationMass < 0 || c.MinLocationMass >= 1 || math.IsNaN(c.MinLocationMass):
		return fmt.Errorf("detector min_location_mass %v: want 0 <= value < 1 (0 disables)", c.MinLocationMass)
	case c.Window < 4:
		return fmt.Errorf("detector window %d: want >= 4", c.Window)
	}
	return nil
}

// Direction says whether a change is good or bad for the metric.
type Direction string

// Directions of a change.
const (
	Regression  Direction = "regression"
	Improvement Direction = "improvement"
)

// ChangePoint is a confirmed change in a series: the first point of the
// new level is Seq.
type ChangePoint struct {
	Seq            int64     `json:"seq"`
	Index          int       `json:"-"` // index of Seq in the (windowed) points
	Direction      Direction `json:"direction"`
	RelativeChange float64   `json:"relative_change"` // (after-before)/|before|
	PValue         float64   `json:"p_value"`         // t-test between the segments
	MWPValue       float64   `json:"mw_p_value"`      // Mann-Whitney between the segments
	BeforeMean     float64   `json:"before_mean"`
	AfterMean      float64   `json:"after_mean"`
	BeforeN        int       `json:"before_n"` // points in the segment before
	AfterN         int       `json:"after_n"`  // points in the segment after
	// LastGoodSeq and FirstBadSeq bound where the change happened: the
	// newest point surely at the old level and the newest point that may
	// still be the first of the new one (the range holds LocationMass of
	// the location's posterior). Points after LastGoodSeq up to and
	// including FirstBadSeq are possibly changed; Seq lies among them.
	// LastGoodSeq is 0 when the range reaches the first point.
	LastGoodSeq int64 `json:"last_good_seq"`
	FirstBadSeq int64 `json:"first_bad_seq"`
	// LastGoodIndex and FirstBadIndex are their indices in the (windowed)
	// points; LastGoodIndex is -1 with LastGoodSeq 0.
	LastGoodIndex int `json:"-"`
	FirstBadIndex int `json:"-"`

	rangeFirst, rangeLast int // the range in confirm's points (outliers set aside)
	keptIndex             int // Index in confirm's points
}

// Detect finds the confirmed change points of one series. points need not
// be sorted; they are ordered by Seq (duplicate Seq values keep input
// order). higherIsBetter gives the direction. Detect is deterministic and
// safe for concurrent use; it returns an error only for an invalid cfg.
// It judges the series by its own noise alone: DetectPooled also weighs
// its siblings' noise.
func Detect(points []Point, higherIsBetter bool, cfg Config) ([]ChangePoint, error) {
	return DetectPooled(points, higherIsBetter, cfg, NoisePrior{})
}

// DetectPooled is Detect with a noise level pooled from the series'
// siblings (PoolNoise of their SeriesNoise): the confirmation test, the
// drift checks and the location range use the df-weighted average of the
// window's own residual variance and the prior (at most cfg.PoolDF
// degrees of freedom of it), unless the two disagree (pooledVar). The
// zero prior is Detect.
func DetectPooled(points []Point, higherIsBetter bool, cfg Config, prior NoisePrior) ([]ChangePoint, error) {
	d, err := detect(points, higherIsBetter, cfg, prior)
	if err != nil {
		return nil, err
	}
	cps := d.cps
	for i := range cps {
		cp := &cps[i]
		cp.Index = d.orig[cp.Index]
		cp.LastGoodIndex, cp.LastGoodSeq = -1, 0
		if cp.rangeFirst > 0 {
			cp.LastGoodIndex = d.orig[cp.rangeFirst-1]
			cp.LastGoodSeq = d.pts[cp.LastGoodIndex].Seq
		}
		cp.FirstBadIndex = d.orig[cp.rangeLast]
		cp.FirstBadSeq = d.pts[cp.FirstBadIndex].Seq
	}
	return cps, nil
}

// isolatedOutliers marks bad runs (a throttled phone, a background task)
// that would otherwise inflate the noise estimate and fake short
// segments: an interior point beyond both neighbours by more than k robust
// standard deviations on the same side, or two points in a row far from
// both outer neighbours while those agree within k. A level shift moves
// two or more consecutive points to a new level that the following
// points share, so it is never marked. k <= 0 marks nothing.
func isolatedOutliers(pts []Point, k float64) []bool {
	out := make([]bool, len(pts))
	if k <= 0 || len(pts) < 5 {
		return out
	}
	sigma := robustSigma(values(pts))
	if sigma == 0 {
		return out
	}
	// The bad runs inflate the noise estimate they are judged by (each
	// adds two large first differences): judge again with the estimate
	// of the points the first look kept.
	var clean []float64
	for i, bad := range markOutliers(pts, k*sigma) {
		if !bad {
			clean = append(clean, pts[i].Value)
		}
	}
	if s := robustSigma(clean); s > 0 && s < sigma {
		sigma = s
	}
	return markOutliers(pts, k*sigma)
}

// markOutliers is isolatedOutliers at the limit lim.
func markOutliers(pts []Point, lim float64) []bool {
	out := make([]bool, len(pts))
	far := func(x, ref float64) bool { return math.Abs(x-ref) > lim }
	for i := 1; i+1 < len(pts); i++ {
		l, x, r := pts[i-1].Value, pts[i].Value, pts[i+1].Value
		if out[i-1] && i >= 2 {
			l = pts[i-2].Value
		}
		if far(x, l) && far(x, r) && (x > l) == (x > r) {
			out[i] = true
			continue
		}
		// Two bad runs in a row between agreeing neighbours.
		if i+2 < len(pts) {
			x2, r2 := pts[i+1].Value, pts[i+2].Value
			if far(x, l) && far(x, r2) && far(x2, l) && far(x2, r2) && !far(l, r2) {
				out[i], out[i+1] = true, true
			}
		}
	}
	// The ends have one neighbour: an end point that jumps away from two
	// agreeing neighbours is set aside too. For the newest point this only
	// defers judgement: if the next result agrees with it, it is no
	// longer isolated and a change needs two points after it anyway.
	n := len(pts)
	end := func(i, j, k int) bool {
		x, a, b := pts[i].Value, pts[j].Value, pts[k].Value
		return math.Abs(x-a) > lim && math.Abs(a-b) < lim
	}
	out[0] = end(0, 1, 2)
	out[n-1] = end(n-1, n-2, n-3) && !out[n-2]
	return out
}

// confirm keeps the candidate boundaries whose adjacent segments differ
// significantly and by at least the minimum effect. The weakest failing
// boundary is dropped and its neighbours re-tested until all pass, so
// segments merged by a dropped boundary are judged as a whole.
func confirm(pts []Point, cands []int, higherIsBetter bool, cfg Config, prior NoisePrior) []ChangePoint {
	floor := seriesNoiseVar(pts)
	level2 := squaredLevel(pts)
	b := slices.Clone(cands)
	// Reruns share a seq: a change starts at the first point of its seq.
	for i, at := range b {
		for at > 0 && pts[at-1].Seq == pts[at].Seq {
			at--
		}
		b[i] = at
	}
	b = slices.DeleteFunc(b, func(at int) bool { return at <= 0 || at >= len(pts) })
	slices.Sort(b)
	b = slices.Compact(b)
	for {
		if len(b) == 0 {
			return nil
		}
		nv := noiseVar{floor: floor, n: len(pts)}
		nv.global, nv.df = segmentedVar(pts, b)
		nv.global, nv.df = pooledVar(nv.global, nv.df, level2, prior, float64(cfg.PoolDF))
		res := make([]ChangePoint, len(b))
		worst, worstScore := -1, math.Inf(-1)
		for i, at := range b {
			lo, hi := 0, len(pts)
			if i > 0 {
				lo = b[i-1]
			}
			if i+1 < len(b) {
				hi = b[i+1]
			}
			cp, ok, score := testSplit(pts[lo:at], pts[at:hi], cfg, nv)
			cp.Index, cp.Seq = at, pts[at].Seq
			res[i] = cp
			if !ok && score > worstScore {
				worst, worstScore = i, score
			}
		}
		if worst < 0 && cfg.Once && cfg.DriftAlpha > 0 {
			worst = globalDriftWorst(pts, b, res, nv, cfg)
		}
		if worst < 0 {
			// A short interior segment between opposite changes is a
			// transient blip (e.g. two slow runs), not two level shifts:
			// drop its weaker boundary and re-test the rest.
			for i := 1; i < len(b); i++ {
				if b[i]-b[i-1] < 2*cfg.MinSegment && (res[i-1].RelativeChange > 0) != (res[i].RelativeChange > 0) {
					worst = i
					if res[i-1].PValue > res[i].PValue {
						worst = i - 1
					}
					break
				}
			}
		}
		if worst < 0 && cfg.DriftAlpha > 0 {
			worst = staircase(pts, b, res, nv.global, cfg.DriftAlpha)
		}
		if worst < 0 {
			return place(pts, b, res, higherIsBetter, cfg, nv)
		}
		b = slices.Delete(b, worst, worst+1)
	}
}

// staircase is the drift check across boundaries: PELT cuts a steady
// drift into a staircase of same-direction steps, each of which may pass
// against its two neighbouring segments alone. For every two consecutive
// boundaries in the same direction it compares the three segments' levels
// with one linear trend across them; if three levels do not fit
// significantly better (at driftAlpha, one parameter more), the weaker
// boundary is returned to be dropped. It returns -1 when every pair is a
// real double step.
func staircase(pts []Point, b []int, res []ChangePoint, s2, driftAlpha float64) int {
	if s2 <= 0 {
		return -1
	}
	for i := 1; i < len(b); i++ {
		if (res[i-1].RelativeChange > 0) != (res[i].RelativeChange > 0) {
			continue
		}
		lo, hi := 0, len(pts)
		if i >= 2 {
			lo = b[i-2]
		}
		if i+1 < len(b) {
			hi = b[i+1]
		}
		levels := 0.0
		for _, seg := range [][]Point{pts[lo:b[i-1]], pts[b[i-1]:b[i]], pts[b[i]:hi]} {
			m := meanOf(seg)
			for _, p := range seg {
				levels += float64((p.Value - m) * (p.Value - m))
			}
		}
		if stat := (trendRSS(pts[lo:hi]) - levels) / s2; normalTwoSided(math.Sqrt(max(stat, 0))) >= driftAlpha {
			if res[i-1].PValue > res[i].PValue {
				return i - 1
			}
			return i
		}
	}
	return -1
}

// trendRSS is the residual sum of squares of a least-squares line through
// pts against Seq.
func trendRSS(pts []Point) float64 {
	n := float64(len(pts))
	var st, sy float64
	for _, p := range pts {
		st += float64(p.Seq)
		sy += p.Value
	}
	tm, ym := st/n, sy/n
	var stt, sty, syy float64
	for _, p := range pts {
		dt, dy := float64(p.Seq)-tm, p.Value-ym
		stt += float64(dt * dt)
		sty += float64(dt * dy)
		syy += float64(dy * dy)
	}
	if stt == 0 {
		return syy
	}
	return syy - sty*sty/stt
}

func direction(rel float64, higherIsBetter bool) Direction {
	if (rel < 0) == higherIsBetter {
		return Regression
	}
	return Improvement
}

// globalDriftWorst returns the boundary to drop first among those whose
// step a trend across the whole window explains (see globalDrift), or -1.
func globalDriftWorst(pts []Point, b []int, res []ChangePoint, nv noiseVar, cfg Config) int {
	worst, worstP := -1, -1.0
	for j, d := range globalDrift(pts, b, nv.global, nv.df) {
		if driftKeeps(d, cfg, res[j].RelativeChange) {
			continue
		}
		if p := max(d.P, d.PCurve); p > worstP {
			worst, worstP = j, p
		}
	}
	return worst
}
