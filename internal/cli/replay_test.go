package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRecordTraceThenReplay: bench --ladder --record-trace writes a trace
// of the golden model that lesfarm replay reads, checks against the model
// and replays with every policy, each reading at least MIN's bytes; bad
// input gets one line and exit 2.
func TestRecordTraceThenReplay(t *testing.T) {
	t.Parallel()
	golden := lesFixture(t, "golden/tiny-qwen3moe-q4_k_m.gguf")
	trained := lesFixture(t, "trained/tiny-moe-kjv-f16.gguf")
	dir := t.TempDir()
	tr := filepath.Join(dir, "g.trace.gz")
	code, out, errOut := runCLI("bench", "--model", golden, "--ladder", "--profile", "laptop-nvme", "--expert-budget", "0.5", "--threads", "1",
		"--repetitions", "1", "--warmup", "1", "--prompt-tokens", "4", "--gen-tokens", "8", "--modes", "scheduled", "--format", "json", "--record-trace", tr)
	if code != 0 {
		t.Fatalf("bench --record-trace: exit %d: %s", code, errOut)
	}
	var rep struct {
		Rows []struct {
			Mode          string  `json:"mode"`
			BytesVsOracle float64 `json:"bytes_vs_oracle"`
		} `json:"rows"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || len(rep.Rows) != 1 || rep.Rows[0].BytesVsOracle < 1 {
		t.Fatalf("ladder JSON %v: %s", err, out)
	}
	code, out, errOut = runCLI("replay", "--trace", tr, "--policy", "all", "--budget", "25%", "--model", golden, "--format", "json", "--horizon", "0,1")
	if code != 0 {
		t.Fatalf("replay: exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 8 {
		t.Fatalf("replay printed %d lines: %s", len(lines), out)
	}
	for _, l := range lines {
		var r replayLine
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatal(err)
		}
		if r.Demands == 0 || r.Hits+r.Reads != r.Demands || r.BytesRead < r.MINBytes || r.BytesVsMIN < 1 {
			t.Fatalf("replay line %+v", r)
		}
	}
	code, out, _ = runCLI("replay", "--trace", tr, "--policy", "lfu", "--budget", "1MiB", "--repeat", "2", "--precision")
	if code != 0 || !strings.Contains(out, "min (Belady)") || !strings.Contains(out, "lfu") || !strings.Contains(out, "rank 1: ") {
		t.Fatalf("replay text: exit %d: %s", code, out)
	}

	truncated := filepath.Join(dir, "t.trace.gz")
	data, _ := os.ReadFile(tr)
	os.WriteFile(truncated, data[:len(data)/2], 0o644)
	notTrace := filepath.Join(dir, "n.trace.gz")
	os.WriteFile(notTrace, []byte("hello"), 0o644)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"another model", []string{"--trace", tr, "--budget", "25%", "--model", trained}, "recorded from another model"},
		{"truncated", []string{"--trace", truncated, "--budget", "25%"}, "truncated"},
		{"not a trace", []string{"--trace", notTrace, "--budget", "25%"}, "not a valid routing trace"},
		{"missing trace", []string{"--trace", filepath.Join(dir, "none"), "--budget", "25%"}, "does not exist"},
		{"unknown policy", []string{"--trace", tr, "--budget", "25%", "--policy", "fifo"}, "unknown cache policy"},
		{"no budget", []string{"--trace", tr}, "--budget is required"},
		{"budget below one call", []string{"--trace", tr, "--budget", "100"}, "needs more than"},
		{"no trace", []string{"--budget", "25%"}, "--trace FILE is required"},
		{"bad horizon", []string{"--trace", tr, "--budget", "25%", "--horizon", "x"}, "--horizon"},
	} {
		code, _, errOut := runCLI(append([]string{"replay"}, tc.args...)...)
		if code != 2 || !strings.Contains(errOut, tc.want) || strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
			t.Errorf("%s: exit %d, stderr %q, want exit 2 with one line containing %q", tc.name, code, errOut, tc.want)
		}
	}
}
