package cli

import (
	"bytes"
	"github.com/lesfarm/lesfarm/internal/fixture"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func lesFixture(t *testing.T, rel string) string {
	t.Helper()
	p := filepath.Join(fixture.SharedDir(), rel)
	if _, err := os.Stat(p); err != nil {
		fixture.Missing(t, p, err, "the pack/ladder CLI test")
	}
	return p
}

func runCLI(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := Main(args, strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

func TestPackAndLadderCLI(t *testing.T) {
	model := lesFixture(t, "trained/tiny-moe-kjv-f16.gguf")
	dir := t.TempDir()
	badProfile := filepath.Join(dir, "bad.yaml")
	os.WriteFile(badProfile, []byte("name: x\nbandwidth: fast\n"), 0o644)
	packed := filepath.Join(dir, "p.gguf")
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"pack no args", []string{"pack"}, 2, "one input model"},
		{"pack no output", []string{"pack", model}, 2, "-o OUT is required"},
		{"pack missing", []string{"pack", filepath.Join(dir, "none.gguf"), "-o", packed}, 2, "does not exist"},
		{"pack dense", []string{"pack", lesFixture(t, "trained/tiny-draft-kjv-f32.gguf"), "-o", packed}, 1, "no stacked expert"},
		{"pack both inputs", []string{"pack", model, "--model", model, "-o", packed}, 2, "one input model"},
		{"pack --model", []string{"pack", "--quiet", "--model", model, "-o", packed}, 0, "one 4096-aligned blob"},
		{"pack", []string{"pack", "--quiet", model, "-o", packed}, 0, "one 4096-aligned blob"},
		{"ladder no storage", []string{"bench", "--model", model, "--ladder", "--expert-budget", "0.2"}, 2, "--profile"},
		{"ladder no budget", []string{"bench", "--model", model, "--ladder", "--profile", "phone-mid"}, 2, "--expert-budget"},
		{"ladder bad profile", []string{"bench", "--model", model, "--ladder", "--profile", badProfile, "--expert-budget", "0.2"}, 2, "bandwidth"},
		{"ladder unknown profile", []string{"bench", "--model", model, "--ladder", "--profile", "phone-x", "--expert-budget", "0.2"}, 2, "built-in"},
		{"ladder tiny budget", []string{"bench", "--model", model, "--ladder", "--profile", "phone-mid", "--expert-budget", "1000", "--threads", "1", "--quiet"}, 2, "smaller than one expert"},
		{"ladder bad storage", []string{"bench", "--model", model, "--ladder", "--storage", "nfs", "--expert-budget", "0.2"}, 2, "--storage"},
		{"ladder two threads", []string{"bench", "--model", model, "--ladder", "--storage", "direct", "--expert-budget", "0.2", "--threads", "1,2"}, 2, "one thread count"},
		{"ladder bad mode", []string{"bench", "--model", model, "--ladder", "--storage", "direct", "--expert-budget", "0.2", "--threads", "1", "--modes", "oracle"}, 2, "--modes"},
		{"ladder", []string{"bench", "--model", model, "--experts", packed, "--ladder", "--storage", "direct", "--expert-budget", "30%", "--threads", "1",
			"--repetitions", "1", "--prompt-tokens", "4", "--gen-tokens", "6", "--modes", "on-demand,scheduled", "--format", "json", "--quiet"}, 0, `"identical_output": true`},
	}
	for _, tc := range tests {
		code, out, errs := runCLI(tc.args...)
		if code != tc.code || !strings.Contains(out+errs, tc.want) {
			t.Errorf("%s: exit %d (want %d), output %q %q, want %q", tc.name, code, tc.code, out, errs, tc.want)
		}
		if tc.code != 0 && strings.Count(strings.TrimSpace(errs), "\n") > 0 {
			t.Errorf("%s: error is not one line: %q", tc.name, errs)
		}
	}
}
