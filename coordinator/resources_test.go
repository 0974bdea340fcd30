package coordinator_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lesfarm/lesfarm/coordinator"
	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/internal/testenv"
	"github.com/lesfarm/lesfarm/jobs"
)

// TestReadyzFullDataDir: a data dir below its free-space floor makes the
// coordinator not ready (naming the dir and the floor) and is exported as
// lesfarm_resource_healthy{resource="disk"} 0, while JetStream's probe
// passes; a run that times out meanwhile is blamed on the farm
// (infra_failed), not on its build.
func TestReadyzFullDataDir(t *testing.T) {
	f := newFarm(t)
	reg := prometheus.NewRegistry()
	dir := t.TempDir()
	c := f.coordinator(t, "c-full", func(cfg *coordinator.Config) {
		cfg.DataDir, cfg.Registry = dir, reg
		cfg.Health = coordinator.HealthConfig{Interval: 100 * time.Millisecond, MinFreeBytes: 1 << 62}
	})
	testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		err := c.Ready(context.Background())
		if err == nil || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "below the") {
			return fmt.Errorf("ready: %v, want the data dir below its floor", err)
		}
		return nil
	})
	healthy := func(res string) float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "lesfarm_resource_healthy" {
				continue
			}
			for _, m := range mf.GetMetric() {
				if m.GetLabel()[0].GetValue() == res {
					return m.GetGauge().GetValue()
				}
			}
		}
		return -1
	}
	if d, js := healthy("disk"), healthy("jetstream"); d != 0 || js != 1 {
		t.Fatalf("lesfarm_resource_healthy disk=%v jetstream=%v, want 0 and 1", d, js)
	}
	if n := count(t, reg, "lesfarm_data_dir_free_bytes"); n != 1 {
		t.Fatalf("lesfarm_data_dir_free_bytes: %d series, want 1", n)
	}

	d := newDriver(t, f.natsURL, "dev-full")
	d.hello(nil)
	ids := trigger(t, c.Store(), 1, func(s *jobs.Spec) { s.Timeout = jobs.Duration(time.Second) })
	d.waitAssignment(10 * time.Second)
	r := waitRun(t, c.Store(), ids[0], store.RunInfraFailed, 10*time.Second)
	if !strings.Contains(r.Error, "timed out after 1s; the farm could not take reports: data dir") {
		t.Fatalf("run error %q, want the timeout and the full data dir", r.Error)
	}
}

// TestReadyzHealthyByDefault: with room on the data dir and JetStream
// answering, the coordinator is ready and both resources read healthy.
func TestReadyzHealthyByDefault(t *testing.T) {
	f := newFarm(t)
	reg := prometheus.NewRegistry()
	c := f.coordinator(t, "c-ok", func(cfg *coordinator.Config) {
		cfg.DataDir, cfg.Registry = t.TempDir(), reg
		cfg.Health = coordinator.HealthConfig{Interval: 100 * time.Millisecond}
	})
	testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		if err := c.Ready(context.Background()); err != nil {
			return err
		}
		if n := count(t, reg, "lesfarm_resource_healthy"); n != 2 {
			return fmt.Errorf("lesfarm_resource_healthy: %d series, want 2", n)
		}
		return nil
	})
	if err := c.FarmUnhealthy(); err != nil {
		t.Fatalf("FarmUnhealthy: %v", err)
	}
}

// count returns how many series of metric name reg holds.
func count(t *testing.T, reg *prometheus.Registry, name string) int {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return len(mf.GetMetric())
		}
	}
	return 0
}
