package agent

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/lesfarm/lesfarm/jobs"
	"github.com/lesfarm/lesfarm/runtime/model"
	"github.com/lesfarm/lesfarm/runtime/tensor"
)

// TestRunnerNoLookahead: a runner built with NoLookahead passes it to the
// runtime, so its lookahead config reads what on-demand-parallel reads and
// predicts nothing, while the same job on a default runner prefetches.
func TestRunnerNoLookahead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "synth.gguf")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg := model.SynthConfig{Layers: 3, Experts: 8, ExpertsUsed: 2, Hidden: 128, ExpertFFN: 256, Heads: 2, Vocab: 300, Type: tensor.Q8_0, Seed: 7}
	if err := model.WriteSynthetic(f, cfg); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	spec := &jobs.Spec{Name: "nolookahead", Prompts: jobs.Prompts{Inline: []string{"In the beginning God created the heaven"}},
		DecodeTokens: 8, Repetitions: 1,
		Matrix: jobs.Matrix{Modes: []jobs.Mode{jobs.ModeOnDemandParallel, jobs.ModeLookahead}, Budgets: []jobs.Budget{{Fraction: 0.25}}}}
	spec.Normalize()
	run := func(noLookahead bool) (parallel, lookahead float64, recall float64, bytesPar, bytesLA float64) {
		t.Helper()
		r := &Runner{Threads: 1, Gate: ThermalGate{Disabled: true}, NoLookahead: noLookahead}
		res, err := r.Run(context.Background(), &Job{Spec: spec, Configs: spec.Expand(), ModelPath: path})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range res {
			if c.Error != "" || !c.Valid {
				t.Fatalf("config %s: %+v", c.ConfigKey, c)
			}
		}
		return res[0].HitRate, res[1].HitRate, res[1].PredictorRecall, res[0].BytesPerToken, res[1].BytesPerToken
	}
	hp, hl, recall, _, _ := run(false)
	if recall == 0 {
		t.Fatalf("default runner: lookahead predicted nothing (hit rate %.3f vs parallel %.3f): the test does not exercise lookahead", hl, hp)
	}
	hp, hl, recall, bp, bl := run(true)
	// Demand-only reads, as on-demand-parallel's (an eviction may pick
	// another expert now and then: the cache learns of reads as they
	// complete in host time).
	if recall != 0 || math.Abs(hl-hp) > 0.05 || math.Abs(bl-bp) > 0.05*bp {
		t.Errorf("NoLookahead runner: lookahead recall %.3f, hit rate %.3f, bytes/token %.0f; on-demand-parallel hit rate %.3f, bytes/token %.0f: want no predictions and the same reads",
			recall, hl, bl, hp, bp)
	}
}
