package agent

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/lesfarm/lesfarm/internal/fixture"
	"github.com/lesfarm/lesfarm/jobs"
	"github.com/lesfarm/lesfarm/runtime/gguf"
	"github.com/lesfarm/lesfarm/runtime/pack"
)

// TestRunnerPacksCompat runs a qwen35moe job whose spec asks for the
// packed-compat layout: the agent packs the model into its work dir in the
// compat layout (merged gate+up, page-aligned experts) and streams the
// experts of that file, with valid results for every streaming config.
func TestRunnerPacksCompat(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	path := filepath.Join(filepath.Dir(file), "..", "..", "shared", "testdata", "qwen35moe", "tiny-qwen35moe-q4_k_m.gguf")
	if _, err := os.Stat(path); err != nil {
		fixture.Missing(t, path, err, "the agent's qwen35moe packed-compat run")
	}
	spec := smokeSpec(t)
	spec.Model.Layout = jobs.LayoutPackedCompat
	spec.Matrix = jobs.Matrix{Modes: []jobs.Mode{jobs.ModeResident, jobs.ModeScheduled}, Budgets: spec.Matrix.Budgets}
	spec.DecodeTokens = 4
	if err := spec.Validate(); err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	r := &Runner{Threads: 1, Gate: ThermalGate{Disabled: true}, WorkDir: work}
	res, err := r.Run(context.Background(), &Job{Spec: spec, Configs: spec.Expand(), ModelPath: path})
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range res {
		if x.Error != "" || !x.Valid {
			t.Fatalf("config: %+v", x)
		}
	}
	compat := filepath.Join(work, "packed", spec.Model.SHA256+".compat.gguf")
	f, err := gguf.Open(compat)
	if err != nil {
		t.Fatalf("no compat model: %v", err)
	}
	defer f.Close()
	if !pack.IsCompat(f) {
		t.Fatal("the agent's packed file is not in the compat layout")
	}
}
