package regress

import (
	"math"
	"slices"
	"sort"
	"sync"
)

// studentTwoSided returns the two-sided p-value of Student's t statistic t
// with df degrees of freedom: P(|T| >= |t|).
func studentTwoSided(t, df float64) float64 {
	if math.IsNaN(t) || df <= 0 {
		return 1
	}
	if math.IsInf(t, 0) {
		return 0
	}
	x := df / (df + float64(t*t))
	return regIncBeta(df/2, 0.5, x)
}

// regIncBeta is the regularized incomplete beta function I_x(a, b).
func regIncBeta(a, b, x float64) float64 {
	switch {
	case x <= 0:
		return 0
	case x >= 1:
		return 1
	}
	la, _ := math.Lgamma(a + b)
	lb, _ := math.Lgamma(a)
	lc, _ := math.Lgamma(b)
	front := math.Exp(la - lb - lc + float64(a*math.Log(x)) + float64(b*math.Log1p(-x)))
	if x < (a+1)/(a+b+2) {
		return front * betaCF(a, b, x) / a
	}
	return 1 - front*betaCF(b, a, 1-x)/b
}

// betaCF evaluates the continued fraction of the incomplete beta function
// by the modified Lentz method.
func betaCF(a, b, x float64) float64 {
	const (
		maxIter = 300
		eps     = 1e-14
		tiny    = 1e-300
	)
	qab, qap, qam := a+b, a+1, a-1
	c, d := 1.0, 1-qab*x/qap
	if math.Abs(d) < tiny {
		d = tiny
	}
	d = 1 / d
	h := d
	for m := 1; m <= maxIter; m++ {
		fm := float64(m)
		m2 := 2 * fm
		aa := fm * (b - fm) * x / ((qam + m2) * (a + m2))
		d = 1 + float64(aa*d)
		if math.Abs(d) < tiny {
			d = tiny
		}
		c = 1 + aa/c
		if math.Abs(c) < tiny {
			c = tiny
		}
		d = 1 / d
		h *= d * c
		aa = -(a + fm) * (qab + fm) * x / ((a + m2) * (qap + m2))
		d = 1 + float64(aa*d)
		if math.Abs(d) < tiny {
			d = tiny
		}
		c = 1 + aa/c
		if math.Abs(c) < tiny {
			c = tiny
		}
		d = 1 / d
		del := float64(d * c)
		h *= del
		if math.Abs(del-1) < eps {
			break
		}
	}
	return h
}

// normalTwoSided returns P(|Z| >= |z|) for a standard normal Z.
func normalTwoSided(z float64) float64 {
	return math.Erfc(math.Abs(z) / math.Sqrt2)
}

// mannWhitney returns the two-sided p-value of the Mann-Whitney U test
// between a and b. Small samples without ties use the exact distribution
// of U; otherwise the normal approximation with tie and continuity
// correction is used.
func mannWhitney(a, b []float64) float64 {
	n1, n2 := len(a), len(b)
	if n1 == 0 || n2 == 0 {
		return 1
	}
	type obs struct {
		v     float64
		fromA bool
	}
	all := make([]obs, 0, n1+n2)
	for _, v := range a {
		all = append(all, obs{v, true})
	}
	for _, v := range b {
		all = append(all, obs{v, false})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].v < all[j].v })
	var rankA, tieTerm float64
	ties := false
	for i := 0; i < len(all); {
		j := i + 1
		for j < len(all) && all[j].v == all[i].v {
			j++
		}
		r := float64(float64(i+j+1) / 2) // mean of ranks i+1..j
		if t := float64(j - i); t > 1 {
			ties = true
			tieTerm += float64(t*t*t) - t
		}
		for k := i; k < j; k++ {
			if all[k].fromA {
				rankA += r
			}
		}
		i = j
	}
	fn1, fn2 := float64(n1), float64(n2)
	u := rankA - float64(fn1*(fn1+1)/2)
	umin := math.Min(u, float64(fn1*fn2)-u)
	if !ties && min(n1, n2) <= exactMWMaxSmall && n1+n2 <= exactMWMaxTotal {
		p := 2 * exactUCDF(min(n1, n2), max(n1, n2), int(math.Round(umin)))
		return math.Min(1, p)
	}
	nn := fn1 + fn2
	mean := float64(fn1 * fn2 / 2)
	v := fn1 * fn2 / 12 * ((nn + 1) - tieTerm/(nn*(nn-1)))
	if v <= 0 {
		return 1
	}
	z := (math.Abs(u-mean) - 0.5) / math.Sqrt(v)
	if z < 0 {
		z = 0
	}
	return normalTwoSided(z)
}

const (
	exactMWMaxSmall = 12
	exactMWMaxTotal = 400
)

// uTable caches the cumulative null distribution of U for sample sizes
// (m, n), m <= n; it is filled lazily and is safe for concurrent use.
var uTable sync.Map // [2]int -> []float64

// exactUCDF returns P(U <= u) under the null for sizes m <= n without ties.
func exactUCDF(m, n, u int) float64 {
	if u < 0 {
		return 0
	}
	if u >= m*n {
		return 1
	}
	key := [2]int{m, n}
	if c, ok := uTable.Load(key); ok {
		return c.([]float64)[u]
	}
	// freq[i][j] over u: number of arrangements of i a's and j b's with
	// statistic u, built with f(i,j,u) = f(i-1,j,u-j) + f(i,j-1,u).
	maxU := m * n
	prev := make([][]float64, n+1) // row i-1: prev[j][u]
	for j := 0; j <= n; j++ {
		prev[j] = []float64{1} // i = 0: one arrangement, U = 0
	}
	for i := 1; i <= m; i++ {
		cur := make([][]float64, n+1)
		cur[0] = []float64{1}
		for j := 1; j <= n; j++ {
			row := make([]float64, i*j+1)
			for uu := range row {
				if uu-j >= 0 && uu-j < len(prev[j]) {
					row[uu] += prev[j][uu-j]
				}
				if uu < len(cur[j-1]) {
					row[uu] += cur[j-1][uu]
				}
			}
			cur[j] = row
		}
		prev = cur
	}
	freq := prev[n]
	total := 0.0
	for _, f := range freq {
		total += f
	}
	cdf := make([]float64, maxU+1)
	acc := 0.0
	for i, f := range freq {
		acc += f
		cdf[i] = acc / total
	}
	uTable.Store(key, cdf)
	return cdf[u]
}

// robustSigma estimates the noise standard deviation of xs from the median
// absolute first difference, which a few steps or outliers barely move.
func robustSigma(xs []float64) float64 {
	if len(xs) < 3 {
		return 0
	}
	d := make([]float64, len(xs)-1)
	for i := 1; i < len(xs); i++ {
		d[i-1] = math.Abs(xs[i] - xs[i-1])
	}
	// median(|X1-X2|) for X ~ N(0, s²) is 0.6745·√2·s.
	return median(d) / (0.67449 * math.Sqrt2)
}

// median returns the median of xs (the mean of the middle two for an even
// count), 0 for none. xs is not modified.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	h := len(s) / 2
	if len(s)%2 == 1 {
		return s[h]
	}
	return (s[h-1] + s[h]) / 2
}

// meanFloats returns the arithmetic mean of xs, 0 for none.
func meanFloats(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}
