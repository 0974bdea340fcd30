// Package stat holds the summary statistics every lesfarm result is
// reported with (mean, median, sample standard deviation, coefficient of
// variation, minimum, maximum) and the outlier rule that repetitions may be
// filtered by. It imports only the standard library, so the runtime, the
// agent and the coordinator share one definition.
package stat

import (
	"math"
	"slices"
)

// Summary is the statistics of a sample. The zero Summary means no values.
type Summary struct {
	N      int     // number of values
	Mean   float64 // arithmetic mean
	Median float64 // middle value (mean of the two middle values for even N)
	// Stddev is the sample standard deviation (N-1 in the denominator; 0
	// for N < 2).
	Stddev float64
	// CV is the coefficient of variation Stddev/Mean (0 when Mean is 0).
	CV       float64
	Min, Max float64
}

// Summarize returns the statistics of xs; the zero Summary for none. xs is
// not modified.
func Summarize(xs []float64) Summary {
	n := len(xs)
	if n == 0 {
		return Summary{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	out := Summary{N: n, Min: s[0], Max: s[n-1], Mean: Mean(s), Median: sortedMedian(s)}
	out.Stddev = Stddev(s)
	if out.Mean != 0 {
		out.CV = out.Stddev / out.Mean
	}
	return out
}

// Mean returns the arithmetic mean of xs, 0 for none.
func Mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// Stddev returns the sample standard deviation of xs (N-1 in the
// denominator), 0 for fewer than two values.
func Stddev(xs []float64) float64 {
	if len(xs) < 2 {
		return 0
	}
	m := Mean(xs)
	var v float64
	for _, x := range xs {
		v += float64((x - m) * (x - m)) // rounded: no FMA on arm64 (scripts/nofma.sh)
	}
	return math.Sqrt(v / float64(len(xs)-1))
}

// Median returns the median of xs without modifying it, 0 for none.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return sortedMedian(s)
}

func sortedMedian(s []float64) float64 {
	h := len(s) / 2
	if len(s)%2 == 1 {
		return s[h]
	}
	return (s[h-1] + s[h]) / 2
}

// MAD returns the median absolute deviation of xs from their median
// (unscaled), 0 for none.
func MAD(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	m := Median(xs)
	d := make([]float64, len(xs))
	for i, x := range xs {
		d[i] = math.Abs(x - m)
	}
	return Median(d)
}

// MADSigma is the factor that turns a MAD into an estimate of the standard
// deviation of normal noise (1/Φ⁻¹(3/4)).
const MADSigma = 1.4826

// OutlierSigmas is the default width of the outlier rule: values farther
// than OutlierSigmas·MADSigma·MAD from the median are outliers.
const OutlierSigmas = 3

// Outliers applies the outlier rule to xs: a value is an outlier when it
// lies farther than k·MADSigma·MAD from the median (k = OutlierSigmas when
// k <= 0), that is beyond median ± k robust standard deviations. Fewer than
// three values, or a MAD of 0 (more than half the values equal), have no
// outliers: the rule needs a spread to measure against. It returns one flag
// per value (true = outlier) and how many there are.
func Outliers(xs []float64, k float64) (out []bool, n int) {
	out = make([]bool, len(xs))
	if len(xs) < 3 {
		return out, 0
	}
	if k <= 0 {
		k = OutlierSigmas
	}
	m, mad := Median(xs), MAD(xs)
	if mad == 0 {
		return out, 0
	}
	lim := k * MADSigma * mad
	for i, x := range xs {
		if math.Abs(x-m) > lim {
			out[i] = true
			n++
		}
	}
	return out, n
}
