package abtest

import (
	"math"
	"testing"
)

// splits calls f with every way to choose n of the N = len(vals) values as
// side a (the rest side b): the permutation null distribution.
func splits(vals []float64, n int, f func(a, b []float64)) {
	N := len(vals)
	var rec func(start int, pick []int)
	rec = func(start int, pick []int) {
		if len(pick) == n {
			in := make([]bool, N)
			for _, i := range pick {
				in[i] = true
			}
			var a, b []float64
			for i, v := range vals {
				if in[i] {
					a = append(a, v)
				} else {
					b = append(b, v)
				}
			}
			f(a, b)
			return
		}
		for i := start; i < N; i++ {
			rec(i+1, append(pick, i))
		}
	}
	rec(0, nil)
}

// TestExactPValuesMatchEnumeration checks the exact KS and Mann–Whitney
// p-values against the permutation distribution enumerated split by split.
func TestExactPValuesMatchEnumeration(t *testing.T) {
	for _, tc := range []struct{ n, m int }{{1, 1}, {2, 3}, {3, 3}, {4, 5}, {5, 5}, {3, 7}, {6, 6}} {
		vals := make([]float64, tc.n+tc.m)
		for i := range vals {
			vals[i] = float64(i + 1)
		}
		var us, ds []float64
		splits(vals, tc.n, func(a, b []float64) {
			u, _ := MannWhitney(a, b)
			d, _ := KolmogorovSmirnov(a, b)
			us, ds = append(us, u), append(ds, d)
		})
		total := float64(len(us))
		nm := float64(tc.n * tc.m)
		i := 0
		splits(vals, tc.n, func(a, b []float64) {
			u, pu := MannWhitney(a, b)
			d, pk := KolmogorovSmirnov(a, b)
			// Two-sided MWU: twice the smaller tail, capped at 1.
			var le, ge, dge float64
			for k := range us {
				if us[k] <= u {
					le++
				}
				if us[k] >= u {
					ge++
				}
				if ds[k] >= d-1e-12 {
					dge++
				}
			}
			want := math.Min(1, 2*math.Min(le, ge)/total)
			if math.Abs(pu-want) > 1e-9 {
				t.Fatalf("n=%d m=%d a=%v: MWU p %v, enumeration %v", tc.n, tc.m, a, pu, want)
			}
			if u < 0 || u > nm {
				t.Fatalf("U %v outside [0, %v]", u, nm)
			}
			if math.Abs(pk-dge/total) > 1e-9 {
				t.Fatalf("n=%d m=%d a=%v: KS p %v, enumeration %v", tc.n, tc.m, a, pk, dge/total)
			}
			i++
		})
	}
}

func TestKnownPValues(t *testing.T) {
	for _, tc := range []struct {
		name     string
		a, b     []float64
		pMWU     float64
		pKS      float64
		tolerate float64
	}{
		{"separated 5+5", []float64{1, 2, 3, 4, 5}, []float64{6, 7, 8, 9, 10}, 2.0 / 252, 2.0 / 252, 1e-12},
		{"separated 3+3", []float64{1, 2, 3}, []float64{4, 5, 6}, 0.1, 0.1, 1e-12},
		{"identical", []float64{3, 3, 3}, []float64{3, 3, 3, 3}, 1, 1, 0},
		{"empty side", nil, []float64{1, 2}, 1, 1, 0},
		// Interleaved perfectly: D = 1/5 at most, nothing to see.
		{"interleaved", []float64{1, 3, 5, 7, 9}, []float64{2, 4, 6, 8, 10}, 174.0 / 252, 1, 1e-9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, pu := MannWhitney(tc.a, tc.b)
			_, pk := KolmogorovSmirnov(tc.a, tc.b)
			if math.Abs(pu-tc.pMWU) > tc.tolerate || math.Abs(pk-tc.pKS) > tc.tolerate {
				t.Fatalf("p MWU %v KS %v, want %v %v", pu, pk, tc.pMWU, tc.pKS)
			}
		})
	}
}

// TestMannWhitneyTieVariance checks the tie-corrected variance the normal
// approximation uses against the permutation variance of U enumerated
// over every split of tied data.
func TestMannWhitneyTieVariance(t *testing.T) {
	for _, tc := range []struct {
		vals []float64
		n    int
	}{
		{[]float64{1, 1, 2, 2, 2, 3, 4, 4}, 3},
		{[]float64{5, 5, 5, 5, 6, 6, 7, 8, 8, 9}, 4},
		{[]float64{1, 1, 1, 1, 1, 2}, 2},
	} {
		var sum, sum2, cnt float64
		splits(tc.vals, tc.n, func(a, b []float64) {
			u, _ := MannWhitney(a, b)
			sum += u
			sum2 += u * u
			cnt++
		})
		mean := sum / cnt
		varEnum := sum2/cnt - mean*mean
		N := float64(len(tc.vals))
		n, m := float64(tc.n), N-float64(tc.n)
		counts := map[float64]float64{}
		for _, v := range tc.vals {
			counts[v]++
		}
		var tie float64
		for _, c := range counts {
			tie += c*c*c - c
		}
		varFormula := n * m / 12 * ((N + 1) - tie/(N*(N-1)))
		if math.Abs(mean-n*m/2) > 1e-9 || math.Abs(varEnum-varFormula) > 1e-9 {
			t.Fatalf("%v: permutation mean %v var %v; formula mean %v var %v", tc.vals, mean, varEnum, n*m/2, varFormula)
		}
	}
}

// TestApproximationsNearExact: past the exact limits the asymptotic
// p-values agree with the exact ones where both apply.
func TestApproximationsNearExact(t *testing.T) {
	a := make([]float64, 20)
	b := make([]float64, 22)
	for i := range a {
		a[i] = float64(2*i) + 0.5
	}
	for i := range b {
		b[i] = float64(2*i) + 6.25
	}
	u, exact := MannWhitney(a, b)
	nm := float64(len(a) * len(b))
	N := float64(len(a) + len(b))
	approx := 2 * normalSF((math.Abs(u-nm/2)-0.5)/math.Sqrt(nm*(N+1)/12))
	if math.Abs(exact-approx) > 0.01 {
		t.Fatalf("MWU exact %v, normal %v", exact, approx)
	}
	d, pk := KolmogorovSmirnov(a, b)
	en := math.Sqrt(nm / N)
	if q := kolmogorovQ((en + 0.12 + 0.11/en) * d); math.Abs(q-pk) > 0.06 {
		t.Fatalf("KS exact %v, asymptotic %v", pk, q)
	}
	for _, tc := range []struct{ lambda, q float64 }{{1.36, 0.0493}, {1.63, 0.0098}, {0.5, 0.9639}} {
		if got := kolmogorovQ(tc.lambda); math.Abs(got-tc.q) > 5e-4 {
			t.Fatalf("Q_KS(%v) = %v, want %v", tc.lambda, got, tc.q)
		}
	}
}

func TestHodgesLehmann(t *testing.T) {
	a := []float64{100, 101, 99, 100.5, 99.5, 100, 100.2, 99.8}
	b := make([]float64, len(a))
	for i, v := range a {
		b[i] = v * 0.95
	}
	s := HodgesLehmann(a, b, 0.95)
	if math.Abs(s.Change-(-0.05)) > 0.005 || !(s.Low <= s.Change && s.Change <= s.High) || s.High >= 0 {
		t.Fatalf("shift %+v, want about -5%% with an interval below 0", s)
	}
	if z := HodgesLehmann(a, a, 0.95); z.Change != 0 || z.Low > 0 || z.High < 0 {
		t.Fatalf("A/A shift %+v, want 0 inside its interval", z)
	}
	neg := HodgesLehmann([]float64{-1, 0, 1}, []float64{1, 2, 3}, 0.95)
	if neg.Change <= 0 {
		t.Fatalf("shift over non-positive values %+v, want positive", neg)
	}
}

func TestSameThreshold(t *testing.T) {
	for _, tc := range []struct {
		name         string
		n, m         int
		effect, cv   float64
		wantOne      bool
		wantLessThan float64
	}{
		{"too few samples", 5, 5, 0.02, 0.03, true, 0},
		{"enough samples", 40, 40, 0.02, 0.03, false, 0.7},
		{"quiet data", 6, 6, 0.02, 0.003, false, 1e-6},
		{"empty", 0, 6, 0.02, 0.01, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := SameThreshold(tc.n, tc.m, tc.effect, tc.cv, DefaultBeta)
			if tc.wantOne != (got == 1) || (!tc.wantOne && got >= tc.wantLessThan) {
				t.Fatalf("SameThreshold = %v", got)
			}
		})
	}
	// More samples, or a larger effect against the noise, lower it.
	if SameThreshold(30, 30, 0.02, 0.03, 0.01) <= SameThreshold(60, 60, 0.02, 0.03, 0.01) {
		t.Fatal("threshold does not fall with the sample size")
	}
}

func TestCompare(t *testing.T) {
	base := []float64{100, 101, 99, 100.5, 99.5, 100.3, 99.7, 100.1}
	scaled := func(f float64) []float64 {
		out := make([]float64, len(base))
		for i, v := range base {
			out[i] = v * f
		}
		return out
	}
	for _, tc := range []struct {
		name string
		a, b []float64
		want Verdict
	}{
		{"5% slower", base, scaled(0.95), Different},
		{"5% faster", base, scaled(1.05), Different},
		{"0.5% slower: below the minimum effect", base, scaled(0.995), Same},
		{"identical", base, base, Same},
		{"too few samples", base[:3], scaled(0.95)[:3], Unknown},
		{"NaN dropped", append([]float64{math.NaN()}, base...), scaled(0.95), Different},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Compare(tc.a, tc.b, Options{})
			if c.Verdict != tc.want {
				t.Fatalf("verdict %s (%s), want %s", c.Verdict, c.Reason, tc.want)
			}
		})
	}
	c := Compare(base, scaled(0.95), Options{})
	if OutcomeOf(c, true) != Regression || OutcomeOf(c, false) != Improvement {
		t.Fatalf("a 5%% drop read as %s for decode tok/s", OutcomeOf(c, true))
	}
}

func TestPlan(t *testing.T) {
	p := Plan{}.WithDefaults()
	for _, tc := range []struct {
		done int
		v    Verdict
		want int
	}{
		{6, Unknown, 6}, {6, Same, 0}, {6, Different, 0}, {27, Unknown, 3}, {30, Unknown, 0},
	} {
		if got := p.More(tc.done, tc.v); got != tc.want {
			t.Fatalf("More(%d, %s) = %d, want %d", tc.done, tc.v, got, tc.want)
		}
	}
	if Combine(Comparison{Verdict: Same}, Comparison{Verdict: Unknown}) != Unknown ||
		Combine(Comparison{Verdict: Unknown}, Comparison{Verdict: Different}) != Different || Combine() != Same {
		t.Fatal("Combine")
	}
}
