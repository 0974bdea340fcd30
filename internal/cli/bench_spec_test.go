package cli_test

import (
	"strings"
	"testing"
)

// TestBenchDraft: bench --draft measures plain and speculative decode side
// by side (the golden model drafting for itself accepts every token).
func TestBenchDraft(t *testing.T) {
	code, out, errOut := run(t, "bench", "--model", goldenQ4, "--draft", goldenQ4, "--draft-k", "2",
		"--threads", "1", "--repetitions", "1", "--warmup", "0", "--prompt-tokens", "4", "--gen-tokens", "8", "--format", "csv")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "model,draft,threads,test,k,") || !strings.Contains(lines[2], ",tg8+draft,2,") || !strings.Contains(lines[2], ",1,") {
		t.Fatalf("csv:\n%s", out)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--model", goldenQ4, "--draft-k", "2"}, "--draft-k needs --draft"},
		{[]string{"--model", goldenQ4, "--draft", "ngram", "--ladder", "--no-speculative"}, "--no-speculative skips"},
		{[]string{"--model", goldenQ4, "--draft", goldenQ4, "--draft-k", "-1"}, "--draft-k \"-1\""},
		{[]string{"--model", goldenQ4, "--draft", goldenQ4, "--threads", "1,2"}, "one thread count"},
		{[]string{"--model", goldenQ4, "--draft", "/nonexistent.gguf"}, "does not exist"},
		{[]string{"--model", goldenQ4, "--ladder", "--draft-k", "2,4"}, "--draft-k \"2,4\" with --ladder: give one draft length"},
	} {
		code, _, errOut := run(t, append([]string{"bench"}, tc.args...)...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("bench %v: exit %d, stderr %q, want exit 2 with %q", tc.args, code, errOut, tc.want)
		}
	}
}

// TestBenchDraftNGramAdaptive: --draft ngram needs no draft file, and
// --draft-k auto adds an adaptive row, in JSON with the verify telemetry.
func TestBenchDraftNGramAdaptive(t *testing.T) {
	code, out, errOut := run(t, "bench", "--model", goldenQ4, "--draft", "ngram", "--draft-k", "2,auto",
		"--threads", "1", "--repetitions", "1", "--warmup", "0", "--prompt-tokens", "4", "--gen-tokens", "8", "--format", "jsonl")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.Contains(lines[1], `"draft":"ngram"`) || !strings.Contains(lines[2], `"adaptive":true`) ||
		!strings.Contains(lines[2], `"k":8`) || !strings.Contains(lines[1], `"tokens_per_cpu_second"`) {
		t.Fatalf("jsonl:\n%s", out)
	}
	code, _, errOut = run(t, "bench", "--model", goldenQ4, "--draft", "ngram", "--draft-k", "aut")
	if code != 2 || !strings.Contains(errOut, "or auto") {
		t.Errorf("--draft-k aut: exit %d, stderr %q", code, errOut)
	}
}

// TestBenchDraftPaired: --draft-k 0 adds a second plain row (an A/A
// control), and every row after the first carries its paired CPU speedup
// over plain with a 95% interval; --draft mtp on a model without the
// block says so in one line.
func TestBenchDraftPaired(t *testing.T) {
	code, out, errOut := run(t, "bench", "--model", goldenQ4, "--draft", "ngram", "--draft-k", "0,auto",
		"--threads", "1", "--repetitions", "3", "--warmup", "0", "--prompt-tokens", "4", "--gen-tokens", "8", "--format", "jsonl")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.Contains(lines[1], `"k":0`) || strings.Contains(lines[1], `"draft"`) ||
		!strings.Contains(lines[1], `"paired_cpu_speedup"`) || !strings.Contains(lines[2], `"paired_ci_low"`) || strings.Contains(lines[0], `"paired_cpu_speedup"`) {
		t.Fatalf("jsonl:\n%s", out)
	}
	code, _, errOut = run(t, "bench", "--model", goldenQ4, "--draft", "mtp", "--draft-k", "auto", "--threads", "1", "--repetitions", "1")
	if code == 0 || !strings.Contains(errOut, "no MTP/NextN block") || strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
		t.Errorf("--draft mtp without the block: exit %d, stderr %q", code, errOut)
	}
}
