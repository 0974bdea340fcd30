package bench

import "math"

// pairedRatio summarises per-repetition ratios of a row to the plain row
// of the same repetition (each pair ran back to back, so the machine's
// load, which moves far more between repetitions than within one, cancels
// in the ratio): the geometric mean and its 95% confidence interval, from
// Student's t on the log ratios. With fewer than two ratios the interval
// is the mean itself.
func pairedRatio(ratios []float64) (mean, lo, hi float64) {
	var logs []float64
	for _, r := range ratios {
		if r > 0 && !math.IsInf(r, 0) {
			logs = append(logs, math.Log(r))
		}
	}
	n := len(logs)
	if n == 0 {
		return 0, 0, 0
	}
	var m float64
	for _, x := range logs {
		m += x
	}
	m /= float64(n)
	if n < 2 {
		return math.Exp(m), math.Exp(m), math.Exp(m)
	}
	var ss float64
	for _, x := range logs {
		ss += float64((x - m) * (x - m))
	}
	half := float64(tQuantile975(n-1) * math.Sqrt(ss/float64(n-1)/float64(n)))
	return math.Exp(m), math.Exp(m - half), math.Exp(m + half)
}

// tQuantile975 is the 97.5% quantile of Student's t with df degrees of
// freedom (exact to 3 decimals up to 30, then the normal's 1.960 plus the
// first correction term).
func tQuantile975(df int) float64 {
	table := [...]float64{12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
		2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
		2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042}
	if df >= 1 && df <= len(table) {
		return table[df-1]
	}
	z := 1.959964
	return z + (z*z*z+z)/(4*float64(df))
}
