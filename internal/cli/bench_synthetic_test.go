package cli_test

import (
	"encoding/json"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestSyntheticModelNotes: on a model lesfarm synth wrote (random
// weights), generate says its text is gibberish; bench --ladder skips the
// +speculative rung with the reason (unless speculative is asked for),
// follows its table with a legend of the columns, and its repetition lines
// carry the time left.
func TestSyntheticModelNotes(t *testing.T) {
	p := filepath.Join(t.TempDir(), "m.gguf")
	if code, _, errOut := run(t, "synth", "--quiet", "--layers", "2", "--experts", "8", "--experts-used", "2", "--hidden", "64", "--expert-ffn", "64",
		"--heads", "2", "--kv-heads", "1", "--vocab", "512", "--type", "Q8_0", "-o", p); code != 0 {
		t.Fatalf("synth: exit %d: %s", code, errOut)
	}
	for _, format := range []string{"text", "json"} {
		code, _, errOut := run(t, "generate", "--model", p, "--prompt", "hello", "--max-tokens", "2", "--threads", "1", "--format", format)
		if code != 0 || !strings.Contains(errOut, "random weights (lesfarm synth): the text below is gibberish") {
			t.Errorf("generate --format %s: exit %d, stderr %q: want the gibberish note", format, code, errOut)
		}
	}
	ladder := []string{"bench", "--model", p, "--ladder", "--profile", "phone-mid", "--expert-budget", "50%", "--threads", "1",
		"--repetitions", "2", "--warmup", "0", "--prompt-tokens", "4", "--gen-tokens", "4"}
	sideBySide := regexp.MustCompile(`bench: repetition 1/2 done \(50%, \d+s elapsed, about \d+s left\)`)
	// One rung at a time: naive … scheduled and the oracle, 2 repetitions each.
	alone := regexp.MustCompile(`bench: lookahead +repetition 2/2 done \(66%, \d+s elapsed, about \d+s left\)`)
	tests := []struct {
		name    string
		args    []string
		skipped bool
		eta     *regexp.Regexp
	}{
		{"default modes", nil, true, sideBySide},
		{"speculative listed", []string{"--modes", "scheduled,speculative"}, false, sideBySide},
		{"one rung at a time", []string{"--one-at-a-time"}, true, alone},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := run(t, append(append([]string{}, ladder...), tc.args...)...)
			if code != 0 {
				t.Fatalf("bench --ladder: exit %d: %s", code, errOut)
			}
			row := strings.Contains(out, "\n| speculative |")
			note := strings.Contains(out, "+speculative skipped: "+p+" has random weights") && strings.Contains(errOut, "bench: +speculative skipped")
			if row == tc.skipped || note != tc.skipped {
				t.Errorf("speculative row %v, skip note %v; want row %v, note %v\n%s", row, note, !tc.skipped, tc.skipped, out)
			}
			for _, w := range []string{", uniform routing (synthetic), storage", "\nRouting (routing-stats, ", ", top-10% share 0.", "× oracle bytes: bytes read per token over the oracle's", "of oracle: the row's t/s as a share of the oracle's", "docs/bench.md"} {
				if !strings.Contains(out, w) {
					t.Errorf("header or legend lacks %q:\n%s", w, out)
				}
			}
			if !tc.eta.MatchString(errOut) {
				t.Errorf("no time left on the repetition line:\n%s", errOut)
			}
		})
	}
	// JSON stays JSON: no legend on stdout; it names the routing preset
	// and carries the measured routing statistics.
	code, out, _ := run(t, append(append([]string{}, ladder...), "--format", "json", "--quiet")...)
	if code != 0 || !strings.HasPrefix(strings.TrimSpace(out), "{") || strings.Contains(out, "Columns:") {
		t.Errorf("bench --ladder --format json: exit %d, stdout %q", code, out)
	}
	var rep struct {
		Routing      string `json:"routing"`
		RoutingStats *struct {
			Tokens     int     `json:"tokens"`
			Top10Share float64 `json:"top10_share"`
			Recall     float64 `json:"recall"`
		} `json:"routing_stats"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if st := rep.RoutingStats; rep.Routing != "uniform" || st == nil || st.Tokens < 2 || st.Top10Share <= 0 || st.Top10Share > 1 || st.Recall <= 0 || st.Recall > 1 {
		t.Errorf("routing %q, routing_stats %+v: want uniform and measured statistics", rep.Routing, st)
	}
}
