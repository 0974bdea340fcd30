package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/api/client"
	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/internal/testenv"
	"github.com/lesfarm/lesfarm/jobs"
)

// Fault suite for issue 29's resources (findings 4, 5 and 12): a real
// `lesfarm serve` process, a real agent running the smoke suite, and a
// fault in the farm's own resources while the run reports. Each case is
// loopback only and bounded in time, and asserts /readyz during the fault,
// the run's final state and blame, and the exact sample count.

// healthFarm is a serve process with one agent registered.
type healthFarm struct {
	base  string
	serve *agentProcess
	st    *store.Store
	cl    *client.Client
	agent *runningAgent
	spec  *jobs.Spec
	args  []string
	bin   string
}

// readyz returns /readyz's status and body (-1 when serve does not answer).
func (f *healthFarm) readyz() (int, string) {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(f.base + "/readyz")
	if err != nil {
		return -1, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, string(b)
}

// metric returns the first sample line of name from /metrics ("" if none).
func (f *healthFarm) metric(name string) string {
	resp, err := http.Get(f.base + "/metrics")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, name) {
			return l
		}
	}
	return ""
}

// startHealthFarm starts serve on dataDir with extra flags (dbURL "":
// serve's embedded PostgreSQL, reached here through its socket), enrolls
// one agent, uploads the smoke model and triggers one smoke run, returning
// once the run is ingesting telemetry.
func startHealthFarm(t *testing.T, dataDir, dbURL, device string, extra ...string) (*healthFarm, *store.Run) {
	t.Helper()
	if testing.Short() || raceEnabled {
		t.Skip("process-level fault tests skipped in -short and -race modes")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("SKIP: the `go` tool is not on PATH, so the lesfarm binary cannot be built")
	}
	modelPath := trainedModel(t)
	b := buildLesfarm(t, goBin)
	ctx := context.Background()
	httpPort, natsPort := freePort(t), freePort(t)
	f := &healthFarm{base: "http://127.0.0.1:" + strconv.Itoa(httpPort), bin: b.path}
	f.args = append([]string{"serve", "--data-dir", dataDir, "--http-addr", "127.0.0.1:" + strconv.Itoa(httpPort),
		"--nats-listen", "127.0.0.1:" + strconv.Itoa(natsPort), "--heartbeat-ttl", "10s", "--health-interval", "200ms"}, extra...)
	if dbURL != "" {
		f.args = append(f.args, "--database-url", dbURL)
	}
	if err := b.wait(); err != nil {
		t.Fatal(err)
	}
	f.serve = startAgentProcess(t, b.path, "serve", f.args...)
	pollUntil(t, 90*time.Second, "serve ready", func() (bool, string) {
		code, body := f.readyz()
		return code == http.StatusOK, fmt.Sprintf("%d %s; %s", code, body, f.serve.status())
	})
	if dbURL == "" {
		q := url.Values{"host": {filepath.Join(dataDir, "pg")}, "port": {"5432"}, "sslmode": {"disable"}}
		dbURL = "postgres://postgres@/postgres?" + q.Encode()
	}
	if f.st, err = store.Open(ctx, dbURL, store.Config{MaxConns: 2}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.st.Close)
	secret, _, err := f.st.CreateDeviceCredential(ctx, device)
	if err != nil {
		t.Fatal(err)
	}
	apiToken, _, err := f.st.CreateAPIToken(ctx, "fault-"+device)
	if err != nil {
		t.Fatal(err)
	}
	if f.cl, err = client.New(f.base, apiToken); err != nil {
		t.Fatal(err)
	}
	if f.spec, err = jobs.Builtin("smoke"); err != nil {
		t.Fatal(err)
	}
	mf, err := os.Open(modelPath)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = f.cl.UploadArtifact(ctx, mf, int64(f.spec.Model.Size), filepath.Base(modelPath), f.spec.Model.SHA256)
	mf.Close()
	if err != nil {
		t.Fatalf("upload the smoke model: %v", err)
	}
	f.agent = startAgent(t, Config{NATSURL: "nats://127.0.0.1:" + strconv.Itoa(natsPort), Name: device, Token: secret,
		Labels: map[string]string{"pool": device}, BatchInterval: 50 * time.Millisecond})
	// Long enough that the fault lands while the run still reports.
	f.spec.Repetitions = 20
	set, err := f.cl.TriggerRuns(ctx, &client.TriggerRequest{Suite: "smoke", Fanout: true, Override: json.RawMessage(`{"repetitions":20}`),
		Devices: &jobs.Selector{Labels: map[string]string{"pool": device}}})
	if err != nil || len(set.Trigger.RunIDs) != 1 {
		t.Fatalf("trigger: %+v %v", set, err)
	}
	var first *store.Run
	pollUntil(t, 2*time.Minute, "run ingesting telemetry", func() (bool, string) {
		first, err = f.st.GetRun(ctx, set.Trigger.RunIDs[0])
		n, _ := f.st.CountSamples(ctx, set.Trigger.RunIDs[0])
		return err == nil && first.State == store.RunRunning && n > 0, fmt.Sprintf("run %+v samples %d", first, n)
	})
	return f, first
}

// waitSucceeded waits for the run to end and checks it succeeded in its
// first attempt with exactly the samples the smoke suite implies.
func (f *healthFarm) waitSucceeded(t *testing.T, first *store.Run) {
	t.Helper()
	ctx := context.Background()
	var done *store.Run
	var err error
	pollUntil(t, 3*time.Minute, "run ended", func() (bool, string) {
		done, err = f.st.GetRun(ctx, first.ID)
		return err == nil && slices.Contains([]string{store.RunSucceeded, store.RunFailed, store.RunCancelled, store.RunInfraFailed, store.RunBuildFailed}, done.State),
			fmt.Sprintf("run %+v; agent %+v; %s", done, f.agent.a.Status(), f.serve.status())
	})
	if done.State != store.RunSucceeded || done.Attempts != 1 || done.Token != first.Token {
		t.Fatalf("run %d: %s after %d attempts, token %d; want succeeded in 1 attempt under token %d (error %q)",
			first.ID, done.State, done.Attempts, done.Token, first.Token, done.Error)
	}
	want := expectedSamples(f.spec)
	pollUntil(t, 30*time.Second, "every sample ingested once", func() (bool, string) {
		n, err := f.st.CountSamples(ctx, first.ID)
		return err == nil && n == want, fmt.Sprintf("%d samples, want %d", n, want)
	})
}

// TestFaultFullDataDir: serve's data dir (embedded JetStream, artifacts)
// is a small tmpfs that fills up while a run reports. /readyz answers 503
// naming the data dir, the agent buffers what JetStream cannot take, and
// once space is back the embedded JetStream is restarted in process
// (a store that hit ENOSPC stays wedged otherwise, finding 4): /readyz is
// 200 again with the same serve process, and the run succeeds in its
// first attempt with every sample exactly once.
func TestFaultFullDataDir(t *testing.T) {
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=384m", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("SKIP: cannot mount a small tmpfs to fill (needs root): %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", mnt).Run() })
	f, first := startHealthFarm(t, mnt, testenv.MigratedPostgresURL(t), "fault-full", "--min-free-space", "8")

	filler := filepath.Join(mnt, "filler")
	fh, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	for {
		if _, err := fh.Write(buf); err != nil {
			break
		}
	}
	fh.Close()
	pollUntil(t, 30*time.Second, "/readyz 503 naming the full data dir", func() (bool, string) {
		code, body := f.readyz()
		return code == http.StatusServiceUnavailable && strings.Contains(body, "below the"), fmt.Sprintf("%d %s", code, body)
	})
	if m := f.metric(`lesfarm_resource_healthy{resource="disk"}`); !strings.HasSuffix(m, " 0") {
		t.Fatalf("metric %q, want the disk unhealthy", m)
	}
	pollUntil(t, time.Minute, "the agent buffering what the farm cannot take", func() (bool, string) {
		st := f.agent.a.Status()
		return st.Buffered > 0, fmt.Sprintf("agent %+v", st)
	})
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	pollUntil(t, time.Minute, "/readyz 200 after space came back", func() (bool, string) {
		code, body := f.readyz()
		return code == http.StatusOK, fmt.Sprintf("%d %s; %s", code, body, f.serve.status())
	})
	f.waitSucceeded(t, first)
	if f.serve.exited() {
		t.Fatalf("serve exited: %s", f.serve.status())
	}
	t.Logf("recoveries: %s; serve log: %q", f.metric("lesfarm_jetstream_recoveries_total"), f.serve.logLines("unhealthy", "JetStream", "healthy again"))
	f.serve.stop(t)
}

// TestFaultPostgresSIGKILL: the PostgreSQL that serve started is
// SIGKILLed while a run reports. /readyz answers 503, serve restarts it
// without restarting itself (finding 5), /readyz is 200 again, and the run
// succeeds in its first attempt with every sample exactly once. A second
// serve on the same data dir meanwhile exits non-zero naming the first
// (finding 12: one JetStream store, one cluster per data dir).
func TestFaultPostgresSIGKILL(t *testing.T) {
	base, err := os.MkdirTemp("", "lesfarm-fault-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil { // reachable by the postgres user when root
		t.Fatal(err)
	}
	f, first := startHealthFarm(t, base, "", "fault-pg")

	// A second serve on the same data dir is refused at once.
	second := exec.Command(f.bin, "serve", "--data-dir", base, "--http-addr", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0")
	out, err := second.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "in use by another lesfarm serve") {
		t.Fatalf("second serve on the data dir: err %v, output %q; want a non-zero exit naming the lock", err, out)
	}

	pidFile, err := os.ReadFile(filepath.Join(base, "pg", "postmaster.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(pidFile), "\n", 2)[0]))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	pollUntil(t, 30*time.Second, "/readyz 503 with PostgreSQL dead", func() (bool, string) {
		code, body := f.readyz()
		return code == http.StatusServiceUnavailable, fmt.Sprintf("%d %s", code, body)
	})
	pollUntil(t, time.Minute, "/readyz 200 after serve restarted PostgreSQL", func() (bool, string) {
		code, body := f.readyz()
		return code == http.StatusOK, fmt.Sprintf("%d %s; %s", code, body, f.serve.status())
	})
	if f.serve.exited() {
		t.Fatalf("serve exited: %s", f.serve.status())
	}
	f.waitSucceeded(t, first)
	if lines := f.serve.logLines("pglocal: postgres restarted"); len(lines) != 1 {
		t.Fatalf("serve logged %d restarts, want 1: %q", len(lines), lines)
	}
	f.serve.stop(t)
}
