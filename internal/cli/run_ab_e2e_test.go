package cli

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/internal/pglocal"
)

// TestABGateOnRealBuilds is the A/B gate end to end: the demo's farm (a
// real coordinator with PostgreSQL and embedded NATS, one emulated phone
// whose agent executes builds as child processes) with its two builds
// compiled from this checkout — b1 the baseline, b2 linked with lookahead
// turned off — and then `lesfarm run --baseline` from the outside, as CI
// runs it, on the lookahead rung: b2 against b1 exits 1 naming the decode
// regression with its interval; b1 against itself exits 0 with no change.
func TestABGateOnRealBuilds(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end A/B gate skipped in -short mode")
	}
	if _, err := pglocal.FindBinDir(os.Getenv("PATH")); err != nil {
		t.Fatalf("the farm needs PostgreSQL binaries: %v", err)
	}
	base, err := os.MkdirTemp("", "lesfarm-ab-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil { // reachable by the postgres user when root
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut syncBuffer
	type farm struct{ base, lineage string }
	ready := make(chan farm, 1)
	o := &demoOptions{dataDir: filepath.Join(base, "farm"), httpAddr: "127.0.0.1:0", profiles: []string{"phone-mid"},
		builds: 2, regressBuild: 2, timeout: 5 * time.Minute, ready: func(b, l string) { ready <- farm{b, l} }}
	if err := o.validate(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- runDemo(&Env{Ctx: ctx, Stdout: &out, Stderr: &errOut}, o) }()
	var f farm
	select {
	case f = <-ready:
	case err := <-done:
		t.Fatalf("farm ended before serving: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errOut.String())
	}
	// The farm prints its API token right after it is ready.
	tokenLine := regexp.MustCompile(`API token for this farm .*: (\S+)`)
	var token string
	deadline := time.Now().Add(30 * time.Second)
	for token == "" && time.Now().Before(deadline) {
		if m := tokenLine.FindStringSubmatch(out.String()); m != nil {
			token = m[1]
			break
		}
		select {
		case err := <-done:
			t.Fatalf("farm ended: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	if token == "" {
		t.Fatalf("the farm printed no API token:\n%s", out.String())
	}
	gate := func(build, baseline string) (int, string) {
		var stdout, stderr syncBuffer
		start := time.Now()
		code := Main([]string{"run", "--suite", demoSuite, "--build", f.lineage + "-" + build, "--baseline", f.lineage + "-" + baseline,
			"--override", `{"modes":["lookahead"],"warmup":0,"repetitions":1}`, "--max-rounds", "5", "--wait", "--timeout", "3m",
			"--server", f.base, "--token", token}, strings.NewReader(""), &stdout, &stderr)
		text := stdout.String() + stderr.String()
		t.Logf("run --build %s --baseline %s: exit %d in %s\n%s", build, baseline, code, time.Since(start).Round(time.Second), text)
		return code, text
	}
	code, text := gate("b2", "b1")
	for _, want := range []string{"A/B verdict after 5 round(s): regression", "lookahead/budget=25% decode_tps: regression", "% interval), p "} {
		if code != 1 || !strings.Contains(text, want) {
			t.Fatalf("the lookahead-off build against the baseline: exit %d, want 1 with %q", code, want)
		}
	}
	// A/A: no verdict of a change. Decode, prefill and TTFT are timed on
	// the phone's device clock, so decode comes out the same (and nothing
	// differs: exit 0).
	if code, text = gate("b1", "b1"); code != 0 || !strings.Contains(text, "lookahead/budget=25% decode_tps: same") ||
		strings.Contains(text, ": regression,") || strings.Contains(text, ": improvement,") {
		t.Fatalf("A/A: exit %d, want 0 with decode the same and no change anywhere", code)
	}
	cancel()
	<-done
}
