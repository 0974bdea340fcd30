package loadtest

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/coordinator"
	"github.com/lesfarm/lesfarm/coordinator/coordinatortest"
	"github.com/lesfarm/lesfarm/coordinator/ingest"
	"github.com/lesfarm/lesfarm/internal/testenv"
	"github.com/lesfarm/lesfarm/protocol"
)

// TestClusterLoad is a benchmark, not a CI test (LESFARM_CLUSTER_LOAD=N
// runs it with N agents): one coordinator and then two on a fresh
// three-node JetStream cluster (streams at R3) each, alternating for
// LESFARM_CLUSTER_ROUNDS rounds (default 1), under the same load
// (LESFARM_CLUSTER_DURATION, default 20s), so the figures of one and two
// coordinators are measured side by side. Each coordinator starts on its
// own node; the agents spread over all three. Everything runs in this
// process (the nodes, the coordinators and the agents), so the report's
// loadgen CPU is the whole farm's; the per-coordinator RSS and CPU of
// /metrics are the process's too.
//
//	LESFARM_CLUSTER_LOAD=1000 go test -run TestClusterLoad -v -timeout 30m ./internal/loadtest/
func TestClusterLoad(t *testing.T) {
	agents, _ := strconv.Atoi(os.Getenv("LESFARM_CLUSTER_LOAD"))
	if agents <= 0 {
		t.Skip("a benchmark: set LESFARM_CLUSTER_LOAD=N (agents) to run it")
	}
	rounds, _ := strconv.Atoi(os.Getenv("LESFARM_CLUSTER_ROUNDS"))
	dur, err := time.ParseDuration(os.Getenv("LESFARM_CLUSTER_DURATION"))
	if err != nil {
		dur = 20 * time.Second
	}
	for r := range max(rounds, 1) {
		for _, n := range []int{1, 2} {
			t.Run(fmt.Sprintf("round%d/coordinators=%d", r+1, n), func(t *testing.T) {
				rep := clusterLoad(t, n, agents, dur)
				t.Logf("%d coordinators, %d agents: %.1f assignments/s; trigger→assign p50 %.0f / p99 %.0f ms; result→next p50 %.0f / p99 %.0f ms; "+
					"samples sent %.0f/s, ingested %.0f/s, lag max %.1f s; lost %d, duplicated %d; load %.1f\n%s",
					n, agents, rep.AssignmentsPerS, rep.TriggerToAssign.P50MS, rep.TriggerToAssign.P99MS, rep.ResultToNext.P50MS, rep.ResultToNext.P99MS,
					rep.SentPerS, rep.IngestedPerS, rep.IngestLagMaxS, rep.LostSamples, rep.DuplicatedSamples, rep.LoadAvg[0], rep.JSON())
			})
		}
	}
}

func clusterLoad(t *testing.T, coordinators, agents int, dur time.Duration) *Report {
	cl := testenv.StartNATSCluster(t, 3)
	dbURL := testenv.MigratedPostgresURL(t)
	var coords []*coordinator.Coordinator
	var metrics []string
	for i := range coordinators {
		c, err := coordinator.New(coordinatortest.Config(t, coordinator.Config{Name: fmt.Sprintf("c%d", i+1),
			HTTPAddr: "127.0.0.1:0", ArtifactBaseURL: "http://127.0.0.1:1", NoNightly: true, Logger: quiet(),
			Ingest: ingest.Config{Replicas: 3}}, dbURL, cl.URL(i)+","+cl.URLs()))
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
	rep, err := Run(context.Background(), Config{Agents: agents, Duration: dur, NATSURL: cl.URLs(), Store: coords[0].Store(),
		MetricsURLs: metrics, DrainTimeout: 90 * time.Second, Logger: quiet()})
	if err != nil {
		t.Errorf("%v", err)
	}
	if rep == nil {
		t.FailNow()
	}
	return rep
}
