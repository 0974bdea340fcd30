package cli_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/lesfarm/lesfarm/internal/loadtest"
)

// asLesfarmEnv makes this test binary act as the lesfarm binary (see
// TestMain), so loadtest can start it as its coordinator.
const asLesfarmEnv = "LESFARM_TEST_AS_LESFARM"

// TestLoadtestEmbedded runs `lesfarm loadtest` without --server: it starts
// a local PostgreSQL and `lesfarm serve` (this test binary) with strict
// per-device NATS authentication, runs 8 agents for 4 s and reports JSON
// with nothing lost; the coordinator's RSS comes from the child process.
func TestLoadtestEmbedded(t *testing.T) {
	if testing.Short() {
		t.Skip("loadtest end-to-end skipped in -short mode")
	}
	t.Setenv(asLesfarmEnv, "1")
	code, stdout, stderr := run(t, "loadtest", "--agents", "8", "--duration", "4s", "--run-length", "1s", "--batch-interval", "250ms",
		"--format", "json")
	if code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	var rep loadtest.Report
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("report: %v\n%s", err, stdout)
	}
	if rep.Agents != 8 || rep.SamplesSent == 0 || rep.SamplesStored != rep.SamplesSent || !rep.OK() || rep.TriggerToAssign.N != 8 {
		t.Fatalf("report %+v", rep)
	}
	if len(rep.Coordinators) != 1 || rep.Coordinators[0].RSSMaxBytes < 1<<20 {
		t.Fatalf("coordinator figures %+v", rep.Coordinators)
	}
	if !strings.Contains(stderr, "loadtest: coordinator pid") {
		t.Errorf("stderr does not name the coordinator: %s", stderr)
	}
}

func TestLoadtestUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"loadtest", "--agents", "0"}, "--agents 0"},
		{[]string{"loadtest", "--duration", "0s"}, "--duration"},
		{[]string{"loadtest", "--format", "xml"}, "--format"},
		{[]string{"loadtest", "--server", "http://x"}, "--server needs --nats-url and --database-url"},
		{[]string{"loadtest", "--nats-url", "nats://x"}, "go with --server"},
	} {
		code, _, stderr := run(t, tc.args...)
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, code, stderr, tc.want)
		}
	}
}
