package agent

import (
	"context"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/lesfarm/lesfarm/coordinator"
	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/internal/testenv"
)

// TestE2ENATSRestartMidRun: the NATS server (JetStream on disk) goes down
// in the middle of a run while telemetry is being ingested, and comes back
// on the same port and store. /readyz says 503 while it is down; the agent
// spills telemetry to its disk buffer, both sides reconnect, and the run
// succeeds in its first attempt with exactly the samples the spec implies.
func TestE2ENATSRestartMidRun(t *testing.T) {
	storeDir := t.TempDir()
	ns, err := testenv.StartNATS(storeDir, -1)
	if err != nil {
		t.Fatal(err)
	}
	port := ns.Addr().(*net.TCPAddr).Port
	var cur atomic.Pointer[server.Server]
	cur.Store(ns)
	t.Cleanup(func() { s := cur.Load(); s.Shutdown(); s.WaitForShutdown() })
	f := newE2EFarmWith(t, e2eDeps{natsURL: ns.ClientURL()}, coordinator.Config{HeartbeatTTL: 10 * time.Second})
	ra := startAgent(t, Config{NATSURL: f.url, Name: "e2e-nats", BatchInterval: 50 * time.Millisecond})
	spec := f.spec.Clone()
	spec.Retry.MaxAttempts = 2
	ctx := context.Background()
	_, runs, err := f.c.Store().CreateRuns(ctx, &store.CreateRunsParams{Spec: spec, Build: "e2e", Fanout: true, Source: "test"})
	if err != nil || len(runs) != 1 {
		t.Fatalf("runs %v err %v", runs, err)
	}
	id := runs[0].ID
	first := f.waitRun(t, id, store.RunRunning, 2*time.Minute)
	waitFor(t, time.Minute, "telemetry ingested mid-run", func() bool {
		n, err := f.c.Store().CountSamples(ctx, id)
		return err == nil && n > 0 && ra.a.Status().RunState == "running"
	})
	ready := func() int {
		resp, err := http.Get("http://" + f.c.HTTPAddr() + "/readyz")
		if err != nil {
			return -1
		}
		resp.Body.Close()
		return resp.StatusCode
	}

	ns.Shutdown()
	ns.WaitForShutdown()
	down := time.Now()
	waitFor(t, 5*time.Second, "/readyz 503 with NATS down", func() bool { return ready() == http.StatusServiceUnavailable })
	if d := time.Since(down); d > 3*time.Second {
		t.Fatalf("/readyz took %v to report NATS down", d)
	}
	waitFor(t, 30*time.Second, "telemetry spilled to the agent's disk buffer", func() bool { return ra.a.Status().Buffered > 0 })
	ns2, err := testenv.StartNATS(storeDir, port)
	if err != nil {
		t.Fatal(err)
	}
	cur.Store(ns2)
	outage := time.Since(down)

	done := f.waitRun(t, id, store.RunSucceeded, 2*time.Minute)
	if done.Attempts != 1 || done.Token != first.Token {
		t.Fatalf("run %d: attempts %d token %d, want 1 attempt under token %d (error %q)", id, done.Attempts, done.Token, first.Token, done.Error)
	}
	want := expectedSamples(spec)
	waitFor(t, 30*time.Second, "every sample ingested", func() bool {
		n, err := f.c.Store().CountSamples(ctx, id)
		return err == nil && n == want
	})
	waitFor(t, 10*time.Second, "/readyz 200 after the restart", func() bool { return ready() == http.StatusOK })
	t.Logf("NATS down for %v", outage.Round(time.Millisecond))
}
