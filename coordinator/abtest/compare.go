package abtest

import (
	"cmp"
	"fmt"
	"math"
)

// Verdict is the answer of Compare.
type Verdict string

// Verdicts.
const (
	// Different: the sides differ by at least the minimum effect (p ≤ Alpha).
	Different Verdict = "different"
	// Same: no change of the minimum effect or more (p above the same
	// threshold, or a significant change below the minimum effect).
	Same Verdict = "same"
	// Unknown: the samples cannot tell yet; add repetitions.
	Unknown Verdict = "unknown"
)

// Defaults of Options.
const (
	DefaultAlpha     = 0.01
	DefaultBeta      = 0.01
	DefaultMinEffect = 0.02
	DefaultLevel     = 0.95
)

// Options tune Compare. The zero value means the defaults.
type Options struct {
	// Alpha is the p-value at or under which the sides are different
	// (default 0.01).
	Alpha float64
	// Beta is the chance, for a true change of exactly MinEffect, that
	// the sides would be called Same (default 0.01): it sets the same
	// threshold.
	Beta float64
	// MinEffect is the smallest relative change worth reporting (default
	// 0.02, 2%).
	MinEffect float64
	// Level is the confidence of the change's interval (default 0.95).
	Level float64
}

func (o Options) withDefaults() Options {
	o.Alpha = cmp.Or(o.Alpha, DefaultAlpha)
	o.Beta = cmp.Or(o.Beta, DefaultBeta)
	o.MinEffect = cmp.Or(o.MinEffect, DefaultMinEffect)
	o.Level = cmp.Or(o.Level, DefaultLevel)
	return o
}

// Comparison is Compare's answer for one metric of one config.
type Comparison struct {
	Verdict Verdict `json:"verdict"`
	// P is min(PKS, PMWU).
	P    float64 `json:"p"`
	PKS  float64 `json:"p_ks"`
	PMWU float64 `json:"p_mwu"`
	// SameThreshold is the p-value above which the sides are Same (1:
	// these samples cannot rule out a MinEffect change yet).
	SameThreshold float64 `json:"same_threshold"`
	// Shift is how much b moved from a, with its interval.
	Shift Shift `json:"shift"`
	// CV is the pooled coefficient of variation of the two sides (the
	// standard deviation of log values).
	CV     float64 `json:"cv"`
	NA     int     `json:"n_a"`
	NB     int     `json:"n_b"`
	Reason string  `json:"reason"`
}

// Compare decides whether b (the build under test) differs from a (the
// baseline) with the package's procedure (see the package doc). Non-finite
// values are dropped first.
func Compare(a, b []float64, o Options) Comparison {
	o = o.withDefaults()
	a, b = finite(a), finite(b)
	c := Comparison{NA: len(a), NB: len(b)}
	_, c.PKS = KolmogorovSmirnov(a, b)
	_, c.PMWU = MannWhitney(a, b)
	c.P = math.Min(c.PKS, c.PMWU)
	c.Shift = HodgesLehmann(a, b, o.Level)
	c.CV = pooledCV(a, b)
	c.SameThreshold = SameThreshold(len(a), len(b), o.MinEffect, c.CV, o.Beta)
	switch {
	case c.P <= o.Alpha && math.Abs(c.Shift.Change) >= o.MinEffect:
		c.Verdict = Different
		c.Reason = fmt.Sprintf("p %.2g ≤ %.2g and the change %+.1f%% is at least %.1f%%", c.P, o.Alpha, 100*c.Shift.Change, 100*o.MinEffect)
	case c.P <= o.Alpha:
		c.Verdict = Same
		c.Reason = fmt.Sprintf("p %.2g ≤ %.2g but the change %+.1f%% is under the minimum effect %.1f%%", c.P, o.Alpha, 100*c.Shift.Change, 100*o.MinEffect)
	case c.P > c.SameThreshold:
		c.Verdict = Same
		c.Reason = fmt.Sprintf("p %.2g is above %.2g, the threshold for a %.1f%% change at CV %.1f%% with %d+%d samples", c.P, c.SameThreshold, 100*o.MinEffect, 100*c.CV, len(a), len(b))
	default:
		c.Verdict = Unknown
		c.Reason = fmt.Sprintf("p %.2g is between %.2g and %.2g: more repetitions needed", c.P, o.Alpha, c.SameThreshold)
	}
	return c
}

// SameThreshold is the p-value above which samples of sizes n and m whose
// coefficient of variation is cv rule out a relative change of minEffect:
// under a shift of minEffect/cv standard deviations the Mann–Whitney
// statistic's z is about μ = (minEffect/cv)·√(nm/(n+m))·√(3/π), and its
// two-sided p-value exceeds 2·(1 − Φ(μ − z_{1−β})) with probability β
// only. It is 1 when μ ≤ z_{1−β} (the samples are too few or too noisy to
// call anything the same) and 0 when cv is 0 (identical values on both
// sides).
func SameThreshold(n, m int, minEffect, cv, beta float64) float64 {
	if n == 0 || m == 0 {
		return 1
	}
	if cv <= 0 {
		return 0
	}
	mu := float64(minEffect / cv * math.Sqrt(float64(n)*float64(m)/float64(n+m)) * math.Sqrt(3/math.Pi))
	z := mu - normalQuantile(1-beta)
	if z <= 0 {
		return 1
	}
	return clamp01(2 * normalSF(z))
}

// pooledCV is the pooled standard deviation of the log values of both
// sides (each side around its own mean): their coefficient of variation.
// Sides with a value that is not positive use the standard deviation over
// a's median instead.
func pooledCV(a, b []float64) float64 {
	if len(a)+len(b) < 3 {
		return 0
	}
	logs := allPositive(a) && allPositive(b)
	scale := math.Abs(median(a))
	if scale == 0 {
		scale = 1
	}
	var ss float64
	df := 0
	for _, side := range [][]float64{a, b} {
		if len(side) == 0 {
			continue
		}
		var mean float64
		vals := make([]float64, len(side))
		for i, v := range side {
			if logs {
				vals[i] = math.Log(v)
			} else {
				vals[i] = v / scale
			}
			mean += vals[i]
		}
		mean /= float64(len(vals))
		for _, v := range vals {
			ss += float64((v - mean) * (v - mean))
		}
		df += len(vals) - 1
	}
	if df <= 0 {
		return 0
	}
	return math.Sqrt(ss / float64(df))
}

func finite(v []float64) []float64 {
	out := make([]float64, 0, len(v))
	for _, x := range v {
		if !math.IsNaN(x) && !math.IsInf(x, 0) {
			out = append(out, x)
		}
	}
	return out
}
