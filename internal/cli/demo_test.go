package cli_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lesfarm/lesfarm/internal/pglocal"
)

// TestDemoRunsSmokeSuiteEndToEnd runs README's main job in-process: a real
// coordinator (embedded NATS, local PostgreSQL), an emulated agent, the
// smoke suite through the REST API, and the results table.
func TestDemoRunsSmokeSuiteEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end demo skipped in -short mode")
	}
	if _, err := pglocal.FindBinDir(os.Getenv("PATH")); err != nil {
		t.Fatalf("the demo needs PostgreSQL binaries: %v", err)
	}
	base, err := os.MkdirTemp("", "lesfarm-demo-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil { // reachable by the postgres user when root
		t.Fatal(err)
	}
	code, out, errOut := run(t, "demo", "--exit", "--profiles", "phone-flagship",
		"--http-addr", "127.0.0.1:0", "--data-dir", filepath.Join(base, "farm"))
	if code != 0 {
		t.Fatalf("demo exit code %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	// Progress lines name the device, or say the run waits for one.
	if strings.Contains(out, " on : ") || !strings.Contains(out, "on emu-phone-flagship-1: ") {
		t.Errorf("demo progress lines without a device name:\n%s", out)
	}
	for _, want := range []string{"coordinator up", "succeeded", "decode tok/s", "resident", "on-demand", "dashboard: http://"} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
}
