package regress

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestEvaluatePlacedDeterministic(t *testing.T) {
	t.Parallel()
	cfg := PlacedConfig{Series: 30, Steps: []float64{0.10}, CVs: []float64{0.01}, Nulls: []Noise{NoiseGaussian}}
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

// TestPlacedGoals: on the placed-step design, the detector meets the
// issue's goals for steps of 5–10% at CV 1–3%: settled recall >= 95%,
// fresh recall >= 60% and false alerts <= 5% of null series (plain,
// outliers, bimodal, slow drift). 100 series per cell keeps it fast;
// the figures in docs/regressions.md are from 400.
func TestPlacedGoals(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("placed-step evaluation: a few seconds")
	}
	res, err := EvaluatePlaced(context.Background(), PlacedConfig{Series: 100, Steps: []float64{0.05, 0.07, 0.10}})
	if err != nil {
		t.Fatal(err)
	}
	s := res.Summaries[0]
	t.Logf("settled %.1f%% fresh %.1f%% false %.1f%% (online %.1f%%)", 100*s.SettledRecall, 100*s.FreshRecall, 100*s.FalseRate, 100*s.OnlineFalse)
	if s.SettledRecall < 0.94 || s.FreshRecall < 0.60 || s.FalseRate > 0.05 {
		t.Errorf("goal region: settled recall %.1f%% (want >= 95, 94 with 100 series), fresh %.1f%% (>= 60), false alerts %.1f%% (<= 5)",
			100*s.SettledRecall, 100*s.FreshRecall, 100*s.FalseRate)
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
	// Measured 47/50 and 44/50 (a change placed 6–7 points off, or read
	// as two smaller steps, is a miss).
	if caught < 45 || raised < 42 {
		t.Errorf("+5.2%% step at CV 3%%, 35 before and 22 after: caught in %d/50 series judged once, raised in %d/50 replays", caught, raised)
	}
}
