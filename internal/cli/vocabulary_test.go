package cli_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lesfarm/lesfarm/profile"
)

// TestHelpListsEveryProfile: agent --help and bench --help name every
// built-in storage profile (they are generated from the registry, so a new
// profile cannot be left out, as phone-flagship-2025 was), and bench
// --help stays a summary with a pointer to docs/bench.md instead of ~110
// lines of schemas.
func TestHelpListsEveryProfile(t *testing.T) {
	for _, cmd := range []string{"agent", "bench"} {
		code, out, errOut := run(t, cmd, "--help")
		if code != 0 {
			t.Fatalf("%s --help: exit %d: %s", cmd, code, errOut)
		}
		for _, p := range profile.Builtin() {
			if !strings.Contains(out, p+",") && !strings.Contains(out, p+")") {
				t.Errorf("%s --help does not list the built-in profile %s", cmd, p)
			}
		}
	}
	_, out, _ := run(t, "bench", "--help")
	if n := strings.Count(out, "\n"); n > 80 || !strings.Contains(out, "docs/bench.md") || strings.Contains(out, `"decode_tokens_per_second"`) {
		t.Errorf("bench --help is %d lines (want ≤ 80), points to docs/bench.md: %v, holds the JSON schema: %v",
			n, strings.Contains(out, "docs/bench.md"), strings.Contains(out, `"decode_tokens_per_second"`))
	}
}

// TestOneVocabulary: the agent's device credential is --device-token, the
// CA is --ca in agent and serve, run's report format is --format json; the
// old spellings (--token, --token-file, --tls-ca, --nats-ca, --json) still
// work, hidden from help, with a warning on stderr; run's usage line does
// not make --devices look required.
func TestOneVocabulary(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret")
	if err := os.WriteFile(secret, []byte("lfd_x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name         string
		args         []string
		code         int
		stderr, warn string
	}{
		// The alias and the new flag set the same value: both given is the
		// "not both" refusal of a flag and its file.
		{"agent --token is --device-token", []string{"agent", "--name", "x", "--print-fingerprint", "--token", "a", "--device-token-file", secret},
			2, "give --device-token or --device-token-file, not both", "--token is deprecated and goes in the next release: use --device-token"},
		{"agent --token-file is --device-token-file", []string{"agent", "--name", "x", "--print-fingerprint", "--device-token", "a", "--token-file", secret},
			2, "not both", "--token-file is deprecated and goes in the next release: use --device-token-file"},
		{"agent --device-token", []string{"agent", "--name", "x", "--print-fingerprint", "--device-token", "a"}, 0, "", ""},
		{"agent --tls-ca is --ca", []string{"agent", "--name", "x", "--nats-url", "nats://127.0.0.1:1", "--tls-ca", filepath.Join(dir, "none.pem")},
			2, "none.pem", "--tls-ca is deprecated and goes in the next release: use --ca"},
		{"serve --nats-ca is --ca", []string{"serve", "--nats-ca", "ca.pem"}, 2, "--nats-creds and --ca need --nats-url", "--nats-ca is deprecated and goes in the next release: use --ca"},
		{"serve --ca", []string{"serve", "--ca", "ca.pem"}, 2, "--nats-creds and --ca need --nats-url", ""},
		{"run --json is --format json", []string{"run", "--suite", "smoke", "--build", "b", "--json"}, 2, "--format json, --junit and --summary need --wait", "--json is deprecated and goes in the next release: use --format json"},
		{"run --format json", []string{"run", "--suite", "smoke", "--build", "b", "--format", "json"}, 2, "--format json, --junit and --summary need --wait", ""},
		{"run --model and a model in --override", []string{"run", "--suite", "smoke", "--build", "b", "--server", "http://127.0.0.1:1", "--model", secret, "--override", `{"model":{"sha256":"x"}}`},
			2, "give the model with --model or in --override, not both", ""},
		{"run --format bogus", []string{"run", "--suite", "smoke", "--build", "b", "--format", "xml"}, 2, `--format "xml": use text or json`, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errOut := run(t, tc.args...)
			if code != tc.code || !strings.Contains(errOut, tc.stderr) {
				t.Fatalf("exit %d, stderr %q; want exit %d and %q", code, errOut, tc.code, tc.stderr)
			}
			if tc.warn != "" && !strings.Contains(errOut, "lesfarm: warning: "+tc.warn) {
				t.Errorf("stderr %q lacks the warning %q", errOut, tc.warn)
			}
			if tc.warn == "" && strings.Contains(errOut, "deprecated") {
				t.Errorf("new spelling warned: %q", errOut)
			}
		})
	}
	for _, tc := range []struct {
		cmd  string
		want []string
		old  []string
	}{
		{"agent", []string{"--device-token ", "--device-token-file ", "--ca "}, []string{"--token ", "--token-file ", "--tls-ca "}},
		{"serve", []string{"--ca "}, []string{"--nats-ca "}},
		{"run", []string{"--format ", "--token ", "--ca "}, []string{"--json "}},
	} {
		_, out, _ := run(t, tc.cmd, "--help")
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("%s --help lacks %s", tc.cmd, w)
			}
		}
		for _, o := range tc.old {
			if strings.Contains(out, "  "+o) || strings.Contains(out, ", "+o) {
				t.Errorf("%s --help still lists the deprecated %s", tc.cmd, o)
			}
		}
	}
	_, out, _ := run(t, "run", "--help")
	_, usage, _ := strings.Cut(out, "Usage:")
	usage, _, _ = strings.Cut(usage, "\n\n")
	if !strings.Contains(usage, "[--devices SELECTOR]") {
		t.Errorf("run's usage line shows --devices as required: %q", usage)
	}
}
