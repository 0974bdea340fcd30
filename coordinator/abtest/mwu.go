package abtest

import (
	"math"
	"slices"
)

// exactMWULimit bounds n+m for the exact Mann–Whitney p-value: the
// Gaussian binomial coefficients stay exact in float64 while
// C(n+m, n) < 2⁵³.
const exactMWULimit = 50

// MannWhitney returns the Mann–Whitney U statistic of a (the number of
// pairs with a > b, ties counting one half) and its two-sided p-value.
// Without ties and with n+m ≤ 50 the p-value is exact; otherwise it is
// the normal approximation with the tie-corrected variance
// nm/12·((N+1) − Σ(t³−t)/(N(N−1))) and a continuity correction of ½. An
// empty side, or every value tied, gives p = 1.
func MannWhitney(a, b []float64) (u, p float64) {
	n, m := len(a), len(b)
	if n == 0 || m == 0 {
		return 0, 1
	}
	type obs struct {
		v    float64
		side int
	}
	all := make([]obs, 0, n+m)
	for _, v := range a {
		all = append(all, obs{v, 0})
	}
	for _, v := range b {
		all = append(all, obs{v, 1})
	}
	slices.SortFunc(all, func(x, y obs) int {
		switch {
		case x.v < y.v:
			return -1
		case x.v > y.v:
			return 1
		}
		return 0
	})
	N := n + m
	var rankA, tieSum float64
	ties := false
	for i := 0; i < N; {
		j := i + 1
		for j < N && all[j].v == all[i].v {
			j++
		}
		mid := float64(float64(i+j+1) / 2) // ranks i+1..j
		for k := i; k < j; k++ {
			if all[k].side == 0 {
				rankA += mid
			}
		}
		if t := float64(j - i); t > 1 {
			ties = true
			tieSum += float64(t*t*t) - t
		}
		i = j
	}
	u = rankA - float64(float64(n)*float64(n+1)/2)
	nm := float64(n) * float64(m)
	if !ties && N <= exactMWULimit {
		return u, mwuExact(n, m, u)
	}
	fN := float64(N)
	v := nm / 12 * ((fN + 1) - tieSum/(fN*(fN-1)))
	if v <= 0 {
		return u, 1
	}
	dev := math.Max(math.Abs(u-float64(nm/2))-0.5, 0)
	return u, clamp01(2 * normalSF(dev/math.Sqrt(v)))
}

// mwuExact is the exact two-sided p-value of U = u for sizes n and m
// without ties: 2·min(P(U ≤ u), P(U ≥ u)), capped at 1. The counts of
// each U are the coefficients of the Gaussian binomial [n+m choose n]_q,
// built as Π_{i=1..n} (1 − q^{m+i}) / (1 − q^i).
func mwuExact(n, m int, u float64) float64 {
	c := make([]float64, n*m+n+1) // room for the product before each division
	c[0] = 1
	deg := 0
	for i := 1; i <= n; i++ {
		s := m + i
		for k := deg + s; k >= s; k-- { // × (1 − q^s)
			c[k] -= c[k-s]
		}
		deg += s
		for k := i; k <= deg; k++ { // ÷ (1 − q^i)
			c[k] += c[k-i]
		}
		deg -= i
	}
	var total, le, ge float64
	for k, v := range c[:n*m+1] {
		total += v
		if float64(k) <= u+1e-9 {
			le += v
		}
		if float64(k) >= u-1e-9 {
			ge += v
		}
	}
	return clamp01(2 * math.Min(le, ge) / total)
}
