package regress

import (
	"context"
	"math/rand/v2"
	"testing"
)

// TestSettledLimits: the limits of single drawn series. A clear step is
// significant at its place, found by the σ-known oracle and placed right
// by the Bayes rule; a faint one in a short series is significant to
// neither test; on a noiseless series the levels-known rule is exact.
func TestSettledLimits(t *testing.T) {
	t.Parallel()
	det := Config{Once: true}
	for _, tc := range []struct {
		name                       string
		fam                        Family
		n, after                   int
		step, cv                   float64
		seeds                      uint64
		ceiling, oracle, signif    int // series out of seeds, at least
		maxOracle, maxSignificance int // and at most
	}{
		{"10% step at CV 1%", PlacedFamilies[0], 50, 20, 0.10, 0.01, 20, 20, 20, 20, 20, 20},
		{"bimodal 10% at CV 1%", PlacedFamilies[3], 50, 20, 0.10, 0.01, 20, 20, 20, 20, 20, 20},
		{"outliers 10% at CV 1%", PlacedFamilies[1], 50, 20, 0.10, 0.01, 20, 20, 0, 19, 20, 20},
		{"3% step at CV 5%, 12 points", PlacedFamilies[5], 12, 4, 0.03, 0.05, 20, 0, 0, 0, 3, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var ceiling, oracle, signif int
			for s := range tc.seeds {
				rng := rand.New(rand.NewPCG(s, 7))
				pts, _, tr := placedSeries(rng, tc.fam, tc.n, tc.after, tc.step, tc.cv)
				at := tc.n - tc.after
				lim := settledLimits(pts, tr, at, tc.n/2, tc.n-4, 1, det, NoisePrior{})
				ceiling += b2i(lim.Ceiling)
				oracle += b2i(lim.Oracle)
				signif += b2i(lim.Significant)
			}
			if ceiling < tc.ceiling || oracle < tc.oracle || oracle > tc.maxOracle || signif < tc.signif || signif > tc.maxSignificance {
				t.Errorf("of %d series: ceiling %d (want >= %d), oracle %d (want %d..%d), significant %d (want %d..%d)",
					tc.seeds, ceiling, tc.ceiling, oracle, tc.oracle, tc.maxOracle, signif, tc.signif, tc.maxSignificance)
			}
		})
	}
	// Without noise the levels-known rule knows the place.
	pts := series(1, 0, steps(100, 20, 105, 10)...)
	tr := placedTruth{base: make([]float64, 30), rel: 0.05, noise: NoiseGaussian, cv: 0.001}
	for i := range tr.base {
		tr.base[i] = 100
	}
	if lim := settledLimits(pts, tr, 20, 10, 26, 0, det, NoisePrior{}); !lim.Ceiling || !lim.Significant || !lim.Oracle {
		t.Errorf("noiseless 5%% step: %+v, want all true", lim)
	}
}

// TestPlacedLimitsAddUp: every settled series is a hit, unfound or
// misplaced; no detector beats the ceiling (the Bayes rule knowing all
// but the place), nor, beyond its sampling noise, what is significant
// at its place at the detector's level.
func TestPlacedLimitsAddUp(t *testing.T) {
	t.Parallel()
	res, err := EvaluatePlaced(context.Background(), PlacedConfig{Series: 40, Siblings: -1, Steps: []float64{0.05, 0.10}, CVs: []float64{0.01, 0.03},
		Families: []Family{PlacedFamilies[0], PlacedFamilies[1], PlacedFamilies[5]}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range res.Cells {
		if c.Settled+c.SettledUnfound+c.SettledMisplaced != c.Series {
			t.Errorf("%s %g/%g: settled %d + unfound %d + misplaced %d != %d series", c.Family, c.Step, c.CV, c.Settled, c.SettledUnfound, c.SettledMisplaced, c.Series)
		}
		if c.Reachable > c.Ceiling || c.Reachable > c.Series-c.Insignificant {
			t.Errorf("%s %g/%g: reachable %d above the ceiling %d or the significant %d", c.Family, c.Step, c.CV, c.Reachable, c.Ceiling, c.Series-c.Insignificant)
		}
		if c.Step == 0.10 && c.CV == 0.01 && c.Ceiling != c.Series {
			t.Errorf("%s 10%% step at CV 1%%: ceiling %d of %d series, want all", c.Family, c.Ceiling, c.Series)
		}
	}
	for _, s := range res.Summaries {
		if s.Series == 0 {
			continue
		}
		t.Logf("%s: settled %.1f%%, reachable %.1f%% [%.1f%%], ceiling %.1f%% [%.1f%%], oracle %.1f%%", s.Region, 100*s.SettledRecall,
			100*s.SettledReachable, 100*s.SettledReachableHigh, 100*s.SettledCeiling, 100*s.SettledCeilingHigh, 100*s.SettledOracle)
		if s.SettledRecall > s.SettledCeilingHigh || s.SettledRecall > s.SettledReachableHigh+0.02 {
			t.Errorf("%s: settled recall %.1f%% above the ceiling's bound %.1f%% or the reachable's %.1f%%", s.Region,
				100*s.SettledRecall, 100*s.SettledCeilingHigh, 100*s.SettledReachableHigh)
		}
	}
}
