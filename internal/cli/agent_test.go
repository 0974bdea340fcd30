package cli_test

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestAgentCommandUsage(t *testing.T) {
	for _, tt := range []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"help", []string{"agent", "--help"}, 0, ""},
		{"no url", []string{"agent", "--name", "a"}, 2, "--nats-url is required"},
		{"bad name", []string{"agent", "--nats-url", "nats://x", "--name", "a b"}, 2, "--name"},
		{"bad labels", []string{"agent", "--nats-url", "nats://x", "--name", "a", "--labels", "novalue"}, 2, "not key=value"},
		{"dup labels", []string{"agent", "--nats-url", "nats://x", "--name", "a", "--labels", "a=1,a=2"}, 2, "twice"},
		{"bad profile", []string{"agent", "--nats-url", "nats://x", "--name", "a", "--profile", "no-such-phone", "--cache-dir", t.TempDir()}, 2, "no-such-phone"},
		{"bad cache max", []string{"agent", "--nats-url", "nats://x", "--name", "a", "--cache-max", "lots"}, 2, "--cache-max"},
		{"bad batch", []string{"agent", "--nats-url", "nats://x", "--name", "a", "--batch-events", "0"}, 2, "--batch-events"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, _, errOut := run(t, tt.args...)
			if code != tt.code || !strings.Contains(errOut, tt.stderr) {
				t.Fatalf("exit %d stderr %q, want %d containing %q", code, errOut, tt.code, tt.stderr)
			}
		})
	}
}

func TestAgentPrintFingerprintEmulated(t *testing.T) {
	code, out, errOut := run(t, "agent", "--print-fingerprint", "--profile", "phone-flagship", "--cache-dir", t.TempDir())
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var fp map[string]any
	if err := json.Unmarshal([]byte(out), &fp); err != nil {
		t.Fatalf("not JSON: %q", out)
	}
	if fp["emulated"] != true || fp["model"] != "emulated:phone-flagship" || fp["profile"] != "phone-flagship" {
		t.Fatalf("fingerprint %s", out)
	}
}
