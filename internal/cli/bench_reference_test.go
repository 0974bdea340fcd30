package cli_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLadderReferenceFlags: --record-reference writes an all-resident
// reference; --reference checks every rung against it; without either the
// reference is streamed; a reference of another model and conflicting
// flags are refused with a clear line.
func TestLadderReferenceFlags(t *testing.T) {
	dir := t.TempDir()
	synth := func(name, seed string) string {
		p := filepath.Join(dir, name)
		if code, _, errOut := run(t, "synth", "--quiet", "--layers", "2", "--experts", "8", "--experts-used", "2", "--hidden", "64", "--expert-ffn", "64",
			"--heads", "2", "--kv-heads", "1", "--vocab", "512", "--type", "Q8_0", "--seed", seed, "-o", p); code != 0 {
			t.Fatalf("synth: exit %d: %s", code, errOut)
		}
		return p
	}
	m, other := synth("m.gguf", "1"), synth("other.gguf", "2")
	ref := filepath.Join(dir, "ref.json")
	ladder := func(model string, extra ...string) []string {
		return append([]string{"bench", "--model", model, "--ladder", "--profile", "phone-mid", "--expert-budget", "50%", "--threads", "1",
			"--repetitions", "1", "--warmup", "0", "--prompt-tokens", "4", "--gen-tokens", "4", "--modes", "on-demand,scheduled", "--no-oracle"}, extra...)
	}
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		source string // in stdout
		errIn  string // in stderr
	}{
		{"streamed by default", ladder(m), 0, "Exactness reference: streamed (on-demand) tokens", ""},
		{"record", ladder(m, "--record-reference", ref), 0, "Exactness reference: all-resident tokens", "written to " + ref},
		{"recorded", ladder(m, "--reference", ref), 0, "Exactness reference: recorded tokens", ""},
		{"recorded, one rung at a time", ladder(m, "--reference", ref, "--one-at-a-time"), 0, "Exactness reference: recorded tokens", "scheduled          repetition 1/1 done"},
		{"another model's", ladder(other, "--reference", ref), 1, "", "the reference was recorded on model sha256"},
		{"both flags", ladder(m, "--reference", ref, "--record-reference", ref), 2, "", "give one of them"},
		{"missing file", ladder(m, "--reference", filepath.Join(dir, "nope.json")), 2, "", "nope.json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := run(t, tc.args...)
			if code != tc.code || !strings.Contains(out, tc.source) || !strings.Contains(errOut, tc.errIn) {
				t.Fatalf("exit %d (want %d)\nstdout: %s\nstderr: %s", code, tc.code, out, errOut)
			}
			if code == 0 && strings.Contains(out, "| false |") {
				t.Fatalf("a rung's tokens differ from the reference:\n%s", out)
			}
		})
	}
	if _, err := os.Stat(ref); err != nil {
		t.Fatal(err)
	}
}
