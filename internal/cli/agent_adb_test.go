package cli_test

import (
	"strings"
	"testing"
)

// TestAgentADBFlags: bad values of agent --adb's flags are a usage error
// (exit 2) with a line naming the flag and what it takes.
func TestAgentADBFlags(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--adb-pin", "medium"}, `--adb-pin "medium"`},
		{[]string{"--adb-evict", "purge"}, `--adb-evict "purge": use fadvise, drop-caches or none`},
		{[]string{"--adb-cooldown-timeout", "0s"}, "--adb-cooldown-timeout 0s: must be positive"},
		{[]string{"--adb-clocks", "turbo"}, `--adb-clocks "turbo"`},
	}
	for _, tc := range tests {
		t.Run(tc.args[0], func(t *testing.T) {
			args := append([]string{"agent", "--adb", "all", "--nats-url", "nats://127.0.0.1:1"}, tc.args...)
			if code, _, errOut := run(t, args...); code != 2 || !strings.Contains(errOut, tc.want) {
				t.Fatalf("agent %v: exit %d %q, want 2 and %q", tc.args, code, errOut, tc.want)
			}
		})
	}
}
