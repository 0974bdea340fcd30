// Package fixturetest locates the shared test fixtures (../shared/testdata
// seen from the repository root) for tests. A missing fixture skips the test
// with a message saying what did not run, unless LESFARM_FIXTURES=require
// (CI), in which case it fails. It is a harness package: production code
// never imports it.
package fixturetest

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// Required reports whether LESFARM_FIXTURES=require is set.
func Required() bool { return os.Getenv("LESFARM_FIXTURES") == "require" }

// Dir returns the shared testdata directory (it may not exist).
func Dir() string {
	_, file, _, _ := runtime.Caller(0)
	// runtime/fixturetest -> repo root -> ../shared/testdata
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "shared", "testdata")
}

// Path returns the shared fixture rel (e.g. "trained/ref.json"). When it is
// missing the test is skipped, or failed under LESFARM_FIXTURES=require.
func Path(t testing.TB, rel string) string {
	t.Helper()
	p := filepath.Join(Dir(), rel)
	if _, err := os.Stat(p); err != nil {
		if Required() {
			t.Fatalf("fixture %s is missing (%v) and LESFARM_FIXTURES=require", p, err)
		}
		t.Skipf("SKIPPING: fixture %s is missing (%v); set LESFARM_FIXTURES=require to fail instead; this check did NOT run", p, err)
	}
	return p
}
