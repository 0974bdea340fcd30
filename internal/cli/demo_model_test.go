package cli

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/lesfarm/lesfarm/jobs"
	"github.com/lesfarm/lesfarm/runtime/model"
)

// TestDemoModelMatchesSuite: the demo's synthetic model, written and
// packed here, is byte for byte the model the built-in les-demo suite
// pins (synth and pack are deterministic), so `lesfarm run --suite
// les-demo` runs on what the demo uploads.
func TestDemoModelMatchesSuite(t *testing.T) {
	spec, err := jobs.Builtin(demoSuite)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), demoModelName)
	if err := writeDemoModel(context.Background(), out, model.RoutingFineGrained); err != nil {
		t.Fatal(err)
	}
	sum, size, err := fileSHA256(out)
	if err != nil {
		t.Fatal(err)
	}
	if sum != spec.Model.SHA256 || size != int64(spec.Model.Size) || spec.Model.Name != demoModelName {
		t.Fatalf("demo model %s: sha256 %s, %d bytes; les-demo.yaml names %s: sha256 %s, %d bytes (update the suite when synth or pack change their output)",
			demoModelName, sum, size, spec.Model.Name, spec.Model.SHA256, spec.Model.Size)
	}
}
