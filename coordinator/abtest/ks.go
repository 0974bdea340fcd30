package abtest

import (
	"math"
	"slices"
)

// exactKSLimit bounds n·m for the exact Kolmogorov–Smirnov p-value; larger
// samples use the asymptotic distribution.
const exactKSLimit = 1 << 20

// KolmogorovSmirnov returns the two-sample Kolmogorov–Smirnov statistic
// D = sup |F_a − F_b| and its two-sided p-value. The p-value is exact
// (the share of the C(n+m, n) equally likely orderings whose empirical
// distributions differ by at least D, counted by a lattice-path
// recursion) while n·m ≤ 2²⁰, and Kolmogorov's asymptotic distribution
// with Stephens' small-sample correction above. Ties are handled in D
// (the distributions are compared only after every tied value); the exact
// p-value then assumes no ties and is conservative. An empty side gives
// D = 0 and p = 1.
func KolmogorovSmirnov(a, b []float64) (d, p float64) {
	n, m := len(a), len(b)
	if n == 0 || m == 0 {
		return 0, 1
	}
	x, y := slices.Clone(a), slices.Clone(b)
	slices.Sort(x)
	slices.Sort(y)
	// k is D·n·m as an integer: |i·m − j·n| at the steps of both ECDFs.
	var k int64
	i, j := 0, 0
	for i < n && j < m {
		v := min(x[i], y[j])
		for i < n && x[i] == v {
			i++
		}
		for j < m && y[j] == v {
			j++
		}
		k = max(k, abs64(int64(i)*int64(m)-int64(j)*int64(n)))
	}
	d = float64(k) / float64(n) / float64(m)
	if k == 0 {
		return 0, 1
	}
	if int64(n)*int64(m) <= exactKSLimit {
		return d, clamp01(1 - ksInside(n, m, k))
	}
	en := math.Sqrt(float64(n) * float64(m) / float64(n+m))
	return d, clamp01(kolmogorovQ((en + 0.12 + 0.11/en) * d))
}

// ksInside is the probability that a uniformly random ordering of n a's
// and m b's keeps |i·m − j·n| < k at every prefix (i a's and j b's): the
// exact null distribution of D·n·m. It walks the lattice one row at a
// time with transition probabilities, so nothing overflows.
func ksInside(n, m int, k int64) float64 {
	row := make([]float64, m+1)
	total := float64(n + m)
	inside := func(i, j int) bool { return abs64(int64(i)*int64(m)-int64(j)*int64(n)) < k }
	row[0] = 1
	for j := 1; j <= m; j++ {
		if !inside(0, j) {
			row[j] = 0
			continue
		}
		row[j] = row[j-1] * float64(m-j+1) / (total - float64(j-1))
	}
	for i := 1; i <= n; i++ {
		for j := 0; j <= m; j++ {
			if !inside(i, j) {
				row[j] = 0
				continue
			}
			rest := total - float64(i+j-1) // items left before the last step
			v := row[j] * float64(n-i+1) / rest
			if j > 0 {
				v += row[j-1] * float64(m-j+1) / rest
			}
			row[j] = v
		}
	}
	return row[m]
}

// kolmogorovQ is Q_KS(λ) = 2 Σ_{k≥1} (−1)^{k−1} exp(−2k²λ²), the limiting
// survival function of √(nm/(n+m))·D.
func kolmogorovQ(lambda float64) float64 {
	if lambda < 0.2 {
		return 1
	}
	var sum float64
	sign := 1.0
	for k := 1; k <= 100; k++ {
		term := float64(sign * math.Exp(-2*float64(k*k)*lambda*lambda))
		sum += term
		if math.Abs(term) < 1e-16 {
			break
		}
		sign = -sign
	}
	return 2 * sum
}

func abs64(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}

func clamp01(p float64) float64 {
	switch {
	case math.IsNaN(p):
		return 1
	case p < 0:
		return 0
	case p > 1:
		return 1
	}
	return p
}
