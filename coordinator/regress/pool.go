package regress

import (
	"cmp"
	"math"
	"slices"
)

// NoisePrior is a noise level pooled from a series' siblings: the other
// series of the same device model, OS and metric (other configs, other
// lineages), whose run-to-run noise is the same phones' noise. A short
// series estimates its own variance from a few degrees of freedom, so its
// t-test needs a large critical value; with the siblings' estimate the
// test is close to the one that knows the noise (see docs/regressions.md,
// "Pooled noise"). The zero value pools nothing.
type NoisePrior struct {
	// RelVar is the residual variance relative to the level squared (a
	// CV²), so siblings at other levels (another config's tok/s) pool.
	RelVar float64 `json:"rel_var"`
	// DF is its degrees of freedom: the points of the series it comes
	// from less one per segment.
	DF float64 `json:"df"`
}

// DefaultPoolDF is the default Config.PoolDF: the most degrees of freedom
// a pooled noise estimate may weigh in a series' variance. A fleet's
// sibling series share the phones' noise only approximately (configs and
// lineages differ a little in CV), so a pool of hundreds of degrees of
// freedom must not override what the series itself shows. Chosen on the
// tuning run of the placed evaluation (see docs/regressions.md).
const DefaultPoolDF = 100

// poolAgreeAlpha is the level of the F-test that decides whether a
// series' own residual variance agrees with its pool: where it does not
// (a noisier config, or a quieter one), the series keeps its own estimate
// (two-sided, this level on each side).
const poolAgreeAlpha = 0.005

// SeriesNoise is the noise estimate of one series as the detector sees it:
// after setting aside isolated bad runs, the residual variance around the
// levels of its confirmed segments (Detect with cfg, no prior), relative
// to each segment's level squared, with its degrees of freedom. A series
// too short to judge gives the zero NoisePrior. It is what a series
// contributes to its siblings' pool (PoolNoise).
func SeriesNoise(points []Point, higherIsBetter bool, cfg Config) NoisePrior {
	d, err := detect(points, higherIsBetter, cfg, NoisePrior{})
	if err != nil || len(d.kept) < 2*cfg.withDefaults().MinSegment+1 {
		return NoisePrior{}
	}
	b := make([]int, 0, len(d.cps))
	for _, cp := range d.cps {
		b = append(b, cp.keptIndex)
	}
	var ss float64
	lo := 0
	for i := 0; i <= len(b); i++ {
		hi := len(d.kept)
		if i < len(b) {
			hi = b[i]
		}
		m := meanOf(d.kept[lo:hi])
		if m == 0 {
			return NoisePrior{}
		}
		for _, p := range d.kept[lo:hi] {
			r := (p.Value - m) / m
			ss += float64(r * r)
		}
		lo = hi
	}
	df := float64(len(d.kept) - len(b) - 1)
	if df < 1 || ss <= 0 {
		return NoisePrior{}
	}
	return NoisePrior{RelVar: ss / df, DF: df}
}

// PoolNoise pools sibling estimates into one prior: their relative
// variances weighted by their degrees of freedom (the pooled variance of
// a one-way layout), with the degrees of freedom summed.
func PoolNoise(est []NoisePrior) NoisePrior {
	var ss, df float64
	for _, e := range est {
		if e.DF > 0 && e.RelVar > 0 && !math.IsInf(e.RelVar, 0) {
			ss += float64(e.DF * e.RelVar)
			df += e.DF
		}
	}
	if df == 0 {
		return NoisePrior{}
	}
	return NoisePrior{RelVar: ss / df, DF: df}
}

// pooledVar combines a window's own residual variance s2 (df degrees of
// freedom, level² the window's squared mean level) with the prior: the
// df-weighted average of the two, the prior weighing at most maxDF. A
// window whose own variance disagrees with the prior (an F-test at
// poolAgreeAlpha on either side) keeps its own.
func pooledVar(s2, df, level2 float64, p NoisePrior, maxDF float64) (float64, float64) {
	if p.DF <= 0 || p.RelVar <= 0 || maxDF <= 0 || s2 <= 0 || df < 1 || level2 <= 0 {
		return s2, df
	}
	pv := p.RelVar * level2
	f := s2 / pv
	if up := fUpper(f, df, p.DF); up < poolAgreeAlpha || 1-up < poolAgreeAlpha {
		return s2, df
	}
	pdf := min(p.DF, maxDF)
	return (float64(df*s2) + float64(pdf*pv)) / (df + pdf), df + pdf
}

// fUpper is P(F ≥ f) for Snedecor's F with d1 and d2 degrees of freedom.
func fUpper(f, d1, d2 float64) float64 {
	if f <= 0 {
		return 1
	}
	return regIncBeta(d2/2, d1/2, d2/(d2+float64(d1*f)))
}

// squaredLevel is the squared mean of pts, the scale of a relative
// variance in the window.
func squaredLevel(pts []Point) float64 {
	m := meanOf(pts)
	return m * m
}

// detection is what detect found: the window's points, those kept after
// setting aside isolated bad runs (orig maps them back) and the
// confirmed change points (Index still in kept).
type detection struct {
	pts, kept []Point
	orig      []int
	cps       []ChangePoint
}

// detect is Detect with a pooled noise prior, leaving the change points'
// indices in the kept points.
func detect(points []Point, higherIsBetter bool, cfg Config, prior NoisePrior) (detection, error) {
	if err := cfg.Validate(); err != nil {
		return detection{}, err
	}
	cfg = cfg.withDefaults()
	pts := slices.Clone(points)
	slices.SortStableFunc(pts, func(a, b Point) int { return cmp.Compare(a.Seq, b.Seq) })
	pts = slices.DeleteFunc(pts, func(p Point) bool { return math.IsNaN(p.Value) || math.IsInf(p.Value, 0) })
	if len(pts) > cfg.Window {
		pts = pts[len(pts)-cfg.Window:]
	}
	d := detection{pts: pts}
	if len(pts) < 2*cfg.MinSegment {
		return d, nil
	}
	out := isolatedOutliers(pts, cfg.OutlierSigmas)
	for i, p := range pts {
		if !out[i] {
			d.orig = append(d.orig, i)
			d.kept = append(d.kept, p)
		}
	}
	if len(d.kept) < 2*cfg.MinSegment {
		return d, nil
	}
	xs := values(d.kept)
	var cands []int
	switch cfg.Method {
	case MethodEDivisive:
		cands = eDivisive(d.kept, xs, cfg)
	default:
		cands = pelt(xs, cfg)
	}
	d.cps = confirm(d.kept, cands, higherIsBetter, cfg, prior)
	for i := range d.cps {
		d.cps[i].keptIndex = d.cps[i].Index
	}
	return d, nil
}
