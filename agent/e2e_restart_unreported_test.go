package agent

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/coordinator"
	"github.com/lesfarm/lesfarm/coordinator/store"
)

// TestE2EFinishedThenProcessKilled: the agent PROCESS finishes a run while
// its link is cut and the coordinator is down, and is then SIGKILLed
// before anyone settled the run. Its finished-run list and the result are
// on disk (CACHE_DIR/unreported), so the restarted process (same name and
// cache dir, as a supervisor would start it) lists the run as finishing in
// its first hello and sends the result again: one attempt, the first
// token, every result and every sample. Without the list on disk the
// restarted agent's hello says it holds no run, the coordinator fails the
// run over as "agent restarted" and the finished work is thrown away.
func TestE2EFinishedThenProcessKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level agent restart test skipped in -short mode")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("SKIP: the `go` tool is not on PATH, so the lesfarm binary cannot be built")
	}
	bin := buildLesfarm(t, goBin)
	// A TTL long enough that the agent is not cut off while it finishes.
	f := newE2EFarmWith(t, e2eDeps{}, coordinator.Config{HeartbeatTTL: 10 * time.Second})
	if err := bin.wait(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	proxy := startFaultProxy(t, f.url[len("nats://"):])
	const device = "e2e-restart"
	cache := t.TempDir()
	args := []string{"agent", "--nats-url", proxy.url(), "--name", device, "--cache-dir", cache,
		"--batch-ms", "100", "--no-thermal-gate", "--log-level", "info"}
	a1 := startAgentProcess(t, bin.path, "first", args...)
	pollUntil(t, 60*time.Second, "agent registered", func() (bool, string) {
		d, err := f.c.Store().GetDevice(ctx, device)
		return err == nil && d.State == "online", a1.status()
	})
	spec := f.spec.Clone()
	spec.Retry.MaxAttempts = 2
	_, runs, err := f.c.Store().CreateRuns(ctx, &store.CreateRunsParams{Spec: spec, Build: "e2e", Fanout: true, Source: "test"})
	if err != nil || len(runs) != 1 {
		t.Fatalf("runs %v err %v", runs, err)
	}
	id := runs[0].ID
	first := f.waitRun(t, id, store.RunRunning, 2*time.Minute)
	// Running means the assignment was acknowledged; the model download
	// from this coordinator comes after it. Cut only once the agent
	// computes, so the run can finish offline.
	pollUntil(t, 2*time.Minute, "agent computing the run", func() (bool, string) {
		return len(a1.logLines("agent: config started")) > 0, a1.status()
	})

	proxy.cut()
	if err := f.c.Stop(); err != nil {
		t.Logf("coordinator stop: %v", err)
	}
	pollUntil(t, 2*time.Minute, "agent finishes the run offline", func() (bool, string) {
		return len(a1.logLines("agent: run reported")) == 1, a1.status()
	})
	files, _ := filepath.Glob(filepath.Join(cache, "unreported", "*.json"))
	if len(files) != 1 {
		t.Fatalf("unreported files %v, want the finished run's", files)
	}
	a1.kill(t)

	f.c = startCoordinator(t, f.cfg)
	proxy.restore()
	a2 := startAgentProcess(t, bin.path, "restarted", args...)
	done := f.waitRun(t, id, store.RunSucceeded, 2*time.Minute)
	if done.Attempts != 1 || done.Token != first.Token {
		t.Fatalf("run %d: attempts %d token %d, want 1 attempt under the first token %d (error %q)", id, done.Attempts, done.Token, first.Token, done.Error)
	}
	if n := len(a2.logLines("finished run from before a restart")); n != 1 {
		t.Fatalf("the restarted agent replayed %d finished runs, want 1", n)
	}
	res, err := f.c.Store().ListResults(ctx, &store.ListResultsParams{RunID: id, Limit: 10})
	if err != nil || len(res) != len(spec.Expand()) {
		t.Fatalf("results %d err %v, want %d", len(res), err, len(spec.Expand()))
	}
	want := expectedSamples(spec)
	pollUntil(t, 30*time.Second, "every sample ingested", func() (bool, string) {
		n, err := f.c.Store().CountSamples(ctx, id)
		return err == nil && n == want, a2.status()
	})
	pollUntil(t, 30*time.Second, "settled run's file removed", func() (bool, string) {
		files, _ := filepath.Glob(filepath.Join(cache, "unreported", "*.json"))
		return len(files) == 0, a2.status()
	})
	a2.stop(t)
	if _, err := os.Stat(filepath.Join(cache, "unreported")); err != nil {
		t.Fatalf("unreported dir: %v", err)
	}
}
