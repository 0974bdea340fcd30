package agent

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/lesfarm/lesfarm/jobs"
	"github.com/lesfarm/lesfarm/runtime/model"
	"github.com/lesfarm/lesfarm/runtime/tensor"
)

// TestRunnerMixedPrecision runs the mixed-precision mode on a synthetic F16
// model: the agent plans and quantizes it once into its work dir (packed,
// as the job asks), runs the scheduled mode on it, and reuses the file for
// the next config.
func TestRunnerMixedPrecision(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "synth.gguf")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := model.WriteSynthetic(f, model.SynthConfig{Layers: 2, Experts: 8, ExpertsUsed: 2, Hidden: 256, ExpertFFN: 256, Heads: 4, KVHeads: 2, Vocab: 512, Context: 256, Type: tensor.F16, Seed: 9}); err != nil {
		t.Fatal(err)
	}
	f.Close()
	spec := smokeSpec(t)
	spec.Model.Layout = jobs.LayoutPacked
	spec.Prompts = jobs.Prompts{Inline: []string{"In the beginning God created"}}
	spec.DecodeTokens, spec.Repetitions, spec.Warmup = 4, 1, 0
	spec.MixedPrecision = &jobs.MixedPrecision{Budget: jobs.Budget{Fraction: 0.4}, CalibTokens: 64}
	spec.Matrix = jobs.Matrix{Modes: []jobs.Mode{jobs.ModeMixedPrecision}, Budgets: []jobs.Budget{{Fraction: 0.25}, {Fraction: 0.5}}}
	work := t.TempDir()
	r := &Runner{Threads: 1, Gate: ThermalGate{Disabled: true}, WorkDir: work}
	res, err := r.Run(context.Background(), &Job{Spec: spec, Configs: spec.Expand(), ModelPath: path})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 {
		t.Fatalf("%d results", len(res))
	}
	for _, c := range res {
		if c.Error != "" || !c.Valid || c.DecodeTPS.Mean <= 0 {
			t.Fatalf("mixed-precision config %s: %+v", c.ConfigKey, c)
		}
	}
	ents, _ := os.ReadDir(filepath.Join(work, "mixed"))
	st, _ := os.Stat(path)
	if len(ents) != 1 {
		t.Fatalf("work dir holds %d mixed models, want 1 (reused)", len(ents))
	}
	info, _ := ents[0].Info()
	if info.Size() >= st.Size() {
		t.Fatalf("mixed model %d bytes, input %d", info.Size(), st.Size())
	}
}
