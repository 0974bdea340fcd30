package regress

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestEvaluatePlacedDeterministic(t *testing.T) {
	t.Parallel()
	cfg := PlacedConfig{Series: 30, Steps: []float64{0.10}, CVs: []float64{0.01}, Families: []Family{PlacedFamilies[0], PlacedFamilies[7]}}
	a, err := EvaluatePlaced(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := EvaluatePlaced(context.Background(), cfg)
	for i := range a.Cells {
		if a.Cells[i] != b.Cells[i] {
			t.Fatalf("not deterministic: %+v vs %+v", a.Cells[i], b.Cells[i])
		}
	}
	var md bytes.Buffer
	if err := a.WriteMarkdown(&md); err != nil || !strings.Contains(md.String(), "settled recall") {
		t.Fatalf("markdown:\n%s", md.String())
	}
}

// TestPlacedGoals: on the placed-step design, scored with placement (a
// change counts only within 1 point of the step; further off it is a
// false alert and a miss), on the goal region (steps >= 5% at CV <= 3%)
// of the gaussian step family and the null families without drift. The
// issue's goals are settled recall >= 95%, fresh >= 65%, false alerts <=
// 5% of alerts and >= 95% of detected steps placed within 1 point; the
// detector reaches three of them on this subset (60 series per cell,
// seed 1: settled 92.0%, fresh 70.7%, placed 98.8%, false 2.5%; before
// the trend-aware drift check, the refined placement and the level
// spent over a window's places: 93.0%, 63.3%, 97.2%, 7.4%; with the
// noise pooled from 3 sibling series per series: 92.4%, 72.0%, 98.6%,
// 2.8%), so the floors here are the measured figures less the
// sampling noise, a guard against getting worse. docs/regressions.md has
// every family, tuning and held-out runs.
func TestPlacedGoals(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("placed-step evaluation: a few seconds")
	}
	var fams []Family
	for _, f := range PlacedFamilies {
		if f.Name == "step" || !f.Step && f.Drift == "" {
			fams = append(fams, f)
		}
	}
	res, err := EvaluatePlaced(context.Background(), PlacedConfig{Series: 60, Steps: []float64{0.05, 0.07, 0.10}, Families: fams, Siblings: 3})
	if err != nil {
		t.Fatal(err)
	}
	s := res.Summaries[0]
	t.Logf("settled %.1f%% fresh %.1f%% placed %.1f%% false %.1f%% (null series %.1f%%)", 100*s.SettledRecall, 100*s.FreshRecall, 100*s.Placed, 100*s.FalseShare, 100*s.NullFalse)
	for _, g := range []struct {
		name     string
		got, min float64
	}{
		{"settled recall", s.SettledRecall, 0.90},
		{"fresh recall", s.FreshRecall, 0.66},
		{"placed within 1", s.Placed, 0.97},
		{"true alerts", 1 - s.FalseShare, 0.96},
	} {
		if g.got < g.min {
			t.Errorf("goal region: %s %.1f%%, want >= %.0f%% (measured before: see the comment)", g.name, 100*g.got, 100*g.min)
		}
	}
}

// TestPlacedDriftNulls: a slow drift is no step. Null series of the
// drift families (a linear drift of 0.03–0.08% per point; an accelerating
// degradation of 2–4%, most of it in the last third) at CV 1–5% alert
// rarely. Measured (60 series per cell, seed 1): drift-linear 2.7%,
// drift-exp 1.7% of series; before the trend-aware drift check (the
// whole window, the quadratic trend, the rescue only for steps of twice
// the minimum effect) and the level spent over a window's places
// (longWindow) 10.3% and 11.7%.
func TestPlacedDriftNulls(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("placed-step evaluation: a second")
	}
	var fams []Family
	for _, f := range PlacedFamilies {
		if !f.Step && f.Drift != "" {
			fams = append(fams, f)
		}
	}
	res, err := EvaluatePlaced(context.Background(), PlacedConfig{Series: 60, Families: fams, Siblings: 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range res.Summaries[2:] {
		t.Logf("%s: %d null series, %.1f%% alerting", s.Region, s.NullSeries, 100*s.NullFalse)
		if s.NullSeries != 300 || s.NullFalse > 0.06 {
			t.Errorf("%s: %.1f%% of %d null series alert, want <= 6%%", s.Region, 100*s.NullFalse, s.NullSeries)
		}
	}
}

func TestWilson(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		k, n   int
		upper  bool
		lo, hi float64 // expected range of the bound
	}{
		{95, 100, false, 0.888, 0.889},
		{5, 100, true, 0.111, 0.113},
		{0, 0, false, 0, 0},
		{0, 50, true, 0.071, 0.072},
		{50, 50, false, 0.928, 0.929},
	} {
		if got := wilson(tc.k, tc.n, tc.upper); got < tc.lo || got > tc.hi {
			t.Errorf("wilson(%d, %d, %v) = %.4f, want in [%g, %g]", tc.k, tc.n, tc.upper, got, tc.lo, tc.hi)
		}
	}
}

// TestDetectLongSettledStep is the missed case: a +5.2% step at
// CV 3% with 35 points before and 22 after (t ≈ 6) must be found when the
// series is judged once (regress detect), and raised on some night when
// it is replayed result by result as the monitor does.
func TestDetectLongSettledStep(t *testing.T) {
	t.Parallel()
	caught, raised := 0, 0
	near := func(cps []ChangePoint) bool {
		// At CV 3% a 5% step's estimated place is often 2–4 points off;
		// the monitor merges change points within 4 (its Tolerance).
		for _, cp := range cps {
			if cp.Direction == Improvement && abs(int(cp.Seq)-135) <= 4 {
				return true
			}
		}
		return false
	}
	for seed := range uint64(50) {
		pts := drawn(seed+900, DesignSeries, 0.03, steps(100, 35, 105.2, 22)...)
		cps, err := Detect(pts, true, Config{Once: true})
		if err != nil {
			t.Fatal(err)
		}
		if len(cps) == 1 && near(cps) {
			caught++
		}
		for n := 37; n <= len(pts); n++ {
			if cps, _ := Detect(pts[:n], true, Config{}); near(cps) {
				raised++
				break
			}
		}
	}
	t.Logf("judged once: %d/50; monitor replay: raised in %d/50", caught, raised)
	// Measured 45/50 and 43/50 (a change placed 6–7 points off, or read
	// as two smaller steps, is a miss; judged once it was 47/50 before
	// the trend-aware drift check and the level spent over a window's
	// places, longWindow).
	if caught < 45 || raised < 42 {
		t.Errorf("+5.2%% step at CV 3%%, 35 before and 22 after: caught in %d/50 series judged once, raised in %d/50 replays", caught, raised)
	}
}
