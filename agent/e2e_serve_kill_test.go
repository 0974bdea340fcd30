package agent

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/api/client"
	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/internal/testenv"
	"github.com/lesfarm/lesfarm/jobs"
)

// TestE2EServeProcessSIGKILL: a real `lesfarm serve` process (embedded NATS
// with JetStream in its data dir, device authentication, REST API) is
// SIGKILLed while it ingests a run's telemetry and is started again on the
// same data dir and ports, as a supervisor would. /readyz does not answer
// while it is gone; the agent keeps running, spills telemetry, reconnects
// with its device credential, and the run succeeds in its first attempt
// with exactly the samples the smoke suite implies: nothing JetStream held
// unacknowledged at the kill is lost or stored twice.
func TestE2EServeProcessSIGKILL(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("process-level serve kill test skipped in -short and -race modes")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("SKIP: the `go` tool is not on PATH, so the lesfarm binary cannot be built")
	}
	modelPath := trainedModel(t)
	bin := buildLesfarm(t, goBin)
	ctx := context.Background()
	dbURL := testenv.MigratedPostgresURL(t)
	st, err := store.Open(ctx, dbURL, store.Config{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	const device = "e2e-serve"
	secret, _, err := st.CreateDeviceCredential(ctx, device)
	if err != nil {
		t.Fatal(err)
	}
	apiToken, _, err := st.CreateAPIToken(ctx, "serve-kill")
	if err != nil {
		t.Fatal(err)
	}
	httpPort, natsPort := freePort(t), freePort(t)
	base := "http://127.0.0.1:" + strconv.Itoa(httpPort)
	dataDir := t.TempDir()
	args := []string{"serve", "--data-dir", dataDir, "--database-url", dbURL, "--http-addr", "127.0.0.1:" + strconv.Itoa(httpPort),
		"--nats-listen", "127.0.0.1:" + strconv.Itoa(natsPort), "--heartbeat-ttl", "10s", "--log-level", "info"}
	ready := func() int {
		c := http.Client{Timeout: 3 * time.Second}
		resp, err := c.Get(base + "/readyz")
		if err != nil {
			return -1
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if err := bin.wait(); err != nil {
		t.Fatal(err)
	}
	s1 := startAgentProcess(t, bin.path, "serve", args...)
	pollUntil(t, 60*time.Second, "serve ready", func() (bool, string) { return ready() == http.StatusOK, s1.status() })

	cl, err := client.New(base, apiToken)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := jobs.Builtin("smoke")
	if err != nil {
		t.Fatal(err)
	}
	mf, err := os.Open(modelPath)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = cl.UploadArtifact(ctx, mf, int64(spec.Model.Size), filepath.Base(modelPath), spec.Model.SHA256)
	mf.Close()
	if err != nil {
		t.Fatalf("upload the smoke model: %v", err)
	}
	ra := startAgent(t, Config{NATSURL: "nats://127.0.0.1:" + strconv.Itoa(natsPort), Name: device, Token: secret,
		Labels: map[string]string{"pool": device}, BatchInterval: 50 * time.Millisecond})
	pollUntil(t, 30*time.Second, "agent registered", func() (bool, string) {
		d, err := st.GetDevice(ctx, device)
		return err == nil && d.State == "online", fmt.Sprintf("%+v %v", ra.a.Status(), err)
	})
	set, err := cl.TriggerRuns(ctx, &client.TriggerRequest{Suite: "smoke", Fanout: true, // no build: the agent's embedded one
		Devices: &jobs.Selector{Labels: map[string]string{"pool": device}}})
	if err != nil || len(set.Trigger.RunIDs) != 1 {
		t.Fatalf("trigger: %+v %v", set, err)
	}
	id := set.Trigger.RunIDs[0]
	var first *store.Run
	pollUntil(t, 2*time.Minute, "run ingesting telemetry", func() (bool, string) {
		first, err = st.GetRun(ctx, id)
		n, _ := st.CountSamples(ctx, id)
		return err == nil && first.State == store.RunRunning && n > 0, fmt.Sprintf("run %+v samples %d", first, n)
	})

	s1.kill(t)
	killed := time.Now()
	if code := ready(); code != -1 {
		t.Fatalf("/readyz answered %d with serve killed", code)
	}
	s2 := startAgentProcess(t, bin.path, "restarted serve", args...)
	pollUntil(t, 60*time.Second, "restarted serve ready", func() (bool, string) { return ready() == http.StatusOK, s2.status() })
	t.Logf("serve down for %v (kill to ready)", time.Since(killed).Round(time.Millisecond))

	var done *store.Run
	pollUntil(t, 2*time.Minute, "run succeeded", func() (bool, string) {
		done, err = st.GetRun(ctx, id)
		return err == nil && slices.Contains([]string{store.RunSucceeded, store.RunFailed, store.RunCancelled, store.RunInfraFailed}, done.State),
			fmt.Sprintf("run %+v; %s", done, s2.status())
	})
	if done.State != store.RunSucceeded || done.Attempts != 1 || done.Token != first.Token {
		t.Fatalf("run %d: %s after %d attempts, token %d; want succeeded in 1 attempt under token %d (error %q)", id, done.State, done.Attempts, done.Token, first.Token, done.Error)
	}
	want := expectedSamples(spec)
	pollUntil(t, 30*time.Second, "every sample ingested once", func() (bool, string) {
		n, err := st.CountSamples(ctx, id)
		return err == nil && n == want, fmt.Sprintf("%d samples, want %d", n, want)
	})
	s2.stop(t)
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
