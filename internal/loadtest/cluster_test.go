package loadtest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/coordinator"
	"github.com/lesfarm/lesfarm/coordinator/coordinatortest"
	"github.com/lesfarm/lesfarm/coordinator/ingest"
	"github.com/lesfarm/lesfarm/internal/testenv"
	"github.com/lesfarm/lesfarm/protocol"
)

// TestClusterLosesNodes runs two coordinators on a three-node JetStream
// cluster (streams at R3) under simulated agents spread over the nodes,
// and during ingest kills the TELEMETRY stream's leader, brings it back,
// then kills the new leader: nothing is lost or duplicated, every run
// succeeds, and the agents of the killed nodes reconnect to the others.
func TestClusterLosesNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("NATS cluster failover skipped in -short mode")
	}
	cl := testenv.StartNATSCluster(t, 3)
	dbURL := testenv.MigratedPostgresURL(t)
	var coords []*coordinator.Coordinator
	var metrics []string
	for i := range 2 {
		// Each coordinator starts on its own node and fails over to the
		// others.
		c, err := coordinator.New(coordinatortest.Config(t, coordinator.Config{Name: fmt.Sprintf("c%d", i+1),
			HTTPAddr: "127.0.0.1:0", ArtifactBaseURL: "http://127.0.0.1:1", NoNightly: true, Logger: quiet(),
			Ingest: ingest.Config{Replicas: 3, AckWait: 5 * time.Second}}, dbURL, cl.URL(i)+","+cl.URLs()))
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Stop() })
		coords = append(coords, c)
		metrics = append(metrics, "http://"+c.HTTPAddr()+"/metrics")
	}
	if _, err := cl.WaitStreamLeader(protocol.StreamTelemetry, 20*time.Second); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	var kills []string
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		// kill takes the current stream leader down and waits for the
		// survivors to elect another.
		kill := func() int {
			leader, err := cl.WaitStreamLeader(protocol.StreamTelemetry, 20*time.Second)
			if err != nil {
				t.Error(err)
				return -1
			}
			cl.Kill(leader)
			kills = append(kills, fmt.Sprintf("n%d at %s", leader, time.Now().Format("15:04:05.000")))
			if _, err := cl.WaitStreamLeader(protocol.StreamTelemetry, 20*time.Second); err != nil {
				t.Error(err)
			}
			return leader
		}
		sleepCtx(ctx, 3*time.Second)
		first := kill()
		if first < 0 {
			return
		}
		sleepCtx(ctx, 2*time.Second)
		if err := cl.Restart(first); err != nil {
			t.Error(err)
			return
		}
		if err := cl.WaitCurrent(first, 20*time.Second); err != nil {
			t.Error(err)
		}
		second := kill()
		sleepCtx(ctx, 2*time.Second)
		if second >= 0 {
			if err := cl.Restart(second); err != nil {
				t.Error(err)
			}
		}
	}()
	rep, err := Run(ctx, Config{Agents: 20, Duration: 14 * time.Second, NATSURL: cl.URLs(), Store: coords[0].Store(), MetricsURLs: metrics,
		RunLength: time.Second, BatchInterval: 200 * time.Millisecond, DrainTimeout: 25 * time.Second, Logger: quiet()})
	wg.Wait()
	if err != nil {
		t.Fatalf("%v\n%s", err, rep.JSON())
	}
	t.Logf("kills: %v\n%s", kills, rep.JSON())
	if len(kills) != 2 {
		t.Fatalf("killed %v, want two stream leaders", kills)
	}
	// An assignment whose acknowledgement was lost with a node is
	// released after AssignTimeout and granted again: the first agent's
	// samples are then fenced out (stale token) and only the current
	// attempt's count. Nothing of it may be lost or stored twice.
	if rep.LostSamples != 0 || rep.DuplicatedSamples != 0 || rep.FailedRuns != 0 || rep.SamplesStored == 0 {
		t.Fatalf("lost %d, duplicated %d samples (sent %d, stored %d); %d runs assigned twice, %d failed",
			rep.LostSamples, rep.DuplicatedSamples, rep.SamplesSent, rep.SamplesStored, rep.DuplicatedAssignments, rep.FailedRuns)
	}
	if rep.DuplicatedAssignments > 0 {
		t.Logf("%d runs granted again after a node loss (fenced: the earlier attempt's data was rejected)", rep.DuplicatedAssignments)
	}
	if rep.Reconnects == 0 {
		t.Error("no agent reconnected: the killed nodes had no clients?")
	}
	for _, c := range rep.Coordinators {
		if c.SamplesCommitted == 0 {
			t.Logf("coordinator %s committed no samples", c.MetricsURL)
		}
	}
}
