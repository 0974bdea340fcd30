package cli

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/lesfarm/lesfarm/jobs"
	"github.com/lesfarm/lesfarm/runtime/model"
)

// TestDemoModelMatchesSuite: the demo's synthetic model, written and
// packed here, is byte for byte the model the built-in les-demo suite
// pins (synth and pack are deterministic), so `lesfarm run --suite
// les-demo` runs on what the demo uploads. A stale file under the model's
// name (an older version's uniform model in a reused data dir) is written
// again, not run under the new suite.
func TestDemoModelMatchesSuite(t *testing.T) {
	spec, err := jobs.Builtin(demoSuite)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	stale := filepath.Join(dir, "models", demoModelName)
	if err := os.MkdirAll(filepath.Dir(stale), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(stale, []byte("an older demo's model"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := demoSynthModel(context.Background(), dir, model.RoutingFineGrained, spec.Model.SHA256)
	if err != nil {
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
