package cli

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestPackCompatCLI packs the qwen35moe fixture in the compat layout and
// runs two ladder rungs on it (the compat file is the model itself), and
// checks the layout flags' one-line errors.
func TestPackCompatCLI(t *testing.T) {
	model := lesFixture(t, "qwen35moe/tiny-qwen35moe-q4_k_m.gguf")
	dir := t.TempDir()
	compat := filepath.Join(dir, "c.gguf")
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"bad layout", []string{"pack", model, "--layout", "zip", "-o", compat}, 2, `--layout "zip" is unknown`},
		{"bad gate-up", []string{"pack", model, "--layout", "compat", "--gate-up", "fused", "-o", compat}, 2, `--gate-up "fused" is unknown`},
		{"compat", []string{"pack", "--quiet", model, "--layout", "compat", "-o", compat}, 0, "merged gate_up + down, 2 aligned reads per expert, expert FFN padded 64 -> 256"},
		{"ladder on compat", []string{"bench", "--model", compat, "--ladder", "--storage", "direct", "--expert-budget", "30%", "--threads", "1",
			"--repetitions", "1", "--prompt-tokens", "4", "--gen-tokens", "6", "--modes", "on-demand,scheduled", "--format", "json", "--quiet"}, 0, `"identical_output": true`},
	} {
		code, out, errs := runCLI(tc.args...)
		if code != tc.code || !strings.Contains(out+errs, tc.want) {
			t.Errorf("%s: exit %d (want %d), output %q %q, want %q", tc.name, code, tc.code, out, errs, tc.want)
		}
		if code != 0 && strings.Count(strings.TrimSpace(errs), "\n") > 0 {
			t.Errorf("%s: error is not one line: %q", tc.name, errs)
		}
	}
}
