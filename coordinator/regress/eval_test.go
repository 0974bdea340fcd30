package regress

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
)

func TestEvaluateSmallGrid(t *testing.T) {
	t.Parallel()
	cfg := EvalConfig{
		Histories: 20,
		Steps:     []float64{0.10},
		CVs:       []float64{0.01},
		Noises:    []Noise{NoiseGaussian, NoiseGaps},
		Settings:  []Setting{{Name: "default"}, {Name: "confirm", ConfirmRerun: true}},
	}
	res, err := Evaluate(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	res2, _ := Evaluate(context.Background(), cfg)
	res.SortCells()
	res2.SortCells()
	for i := range res.Cells {
		if res.Cells[i] != res2.Cells[i] {
			t.Fatalf("evaluation is not deterministic: %+v vs %+v", res.Cells[i], res2.Cells[i])
		}
	}
	for _, c := range res.Cells {
		if c.Histories != 20 {
			t.Fatalf("cell %+v: want 20 histories", c)
		}
		// A 10% step at 1% noise is 10σ: every history must catch it
		// within 2 runs, and the null cell must stay nearly silent.
		if c.Step > 0 && c.HitsAt2 < 19 {
			t.Errorf("cell %+v: recall@2 %d/20 for a 10σ step", c, c.HitsAt2)
		}
		if c.Step == 0 && c.FalseAlerts > 4 {
			t.Errorf("null cell %+v: %d false alerts", c, c.FalseAlerts)
		}
	}
	var md bytes.Buffer
	if err := res.WriteMarkdown(&md); err != nil || !strings.Contains(md.String(), "## Grid: confirm, design n1") {
		t.Fatalf("markdown:\n%s", md.String())
	}
}

func TestEvaluateCancel(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Evaluate(ctx, EvalConfig{Histories: 1000}); err == nil {
		t.Fatal("Evaluate ignored a cancelled context")
	}
}

func TestEvaluateRejectsBadSetting(t *testing.T) {
	t.Parallel()
	if _, err := Evaluate(context.Background(), EvalConfig{Settings: []Setting{{Name: "x", Config: Config{Alpha: 3}}}}); err == nil {
		t.Fatal("want error for alpha 3")
	}
}

// BenchmarkDetect measures one detector run on a history with a 5% step
// at CV 3%, the work done per new result of a series: 48 points (a few
// weeks of nightlies) and 120 (the default window).
func BenchmarkDetect(b *testing.B) {
	for _, n := range []int{48, 120} {
		h := genHistory(1, 2, DesignN5PerRep, NoiseGaussian, 0.05, 0.03, EvalConfig{PreMin: n - 8, PreMax: n - 8}.withDefaults())
		for _, m := range []Method{MethodPELT, MethodEDivisive} {
			b.Run(fmt.Sprintf("%s/n=%d", m, n), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, err := Detect(h.points, true, Config{Method: m}); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkEvaluate runs the harness on the goal region (steps 5 and 10%,
// CV 1–3%, gaussian) and reports recall with 2 and 4 runs after the step
// and the false-alert share as custom metrics.
func BenchmarkEvaluate(b *testing.B) {
	cfg := EvalConfig{Histories: 50, Steps: []float64{0.05, 0.10}, CVs: []float64{0.01, 0.02, 0.03}, Noises: []Noise{NoiseGaussian}}
	for _, set := range []Setting{{Name: "pelt"}, {Name: "edivisive", Config: Config{Method: MethodEDivisive}}} {
		b.Run(set.Name, func(b *testing.B) {
			b.ReportAllocs()
			cfg := cfg
			cfg.Settings = []Setting{set}
			var s Summary
			for b.Loop() {
				res, err := Evaluate(context.Background(), cfg)
				if err != nil {
					b.Fatal(err)
				}
				s = res.Summaries[0]
			}
			b.ReportMetric(100*s.RecallAt2, "recall@2_%")
			b.ReportMetric(100*s.RecallAt4, "recall@4_%")
			b.ReportMetric(100*s.FalseAlertShare, "false_alerts_%")
		})
	}
}
