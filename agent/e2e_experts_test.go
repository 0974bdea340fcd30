package agent

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/agent/device"
	"github.com/lesfarm/lesfarm/coordinator"
	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/internal/testenv"
	"github.com/lesfarm/lesfarm/jobs"
)

// checkExpertLoad checks a real run's per-expert counts against its
// per-layer sample counts, config by config: every config has counts for
// its routed layers, and where the expert store reported hits and misses,
// a layer's demands are its hits + misses and its expert misses its
// misses (one definition: a hit is a demanded expert resident when
// needed).
func checkExpertLoad(t *testing.T, st *store.Store, runID int64, configs int) {
	t.Helper()
	ctx := context.Background()
	for c := range configs {
		totals, steps, err := st.LayerTotals(ctx, runID, c)
		if err != nil {
			t.Fatal(err)
		}
		// The counts ride on telemetry batches, the last of them sent when
		// the run closes, possibly without samples: wait until every
		// layer's counts cover the steps the samples do.
		var load []store.ExpertLayer
		testenv.Eventually(t, 30*time.Second, 50*time.Millisecond, func() error {
			if load, err = st.ExpertLoad(ctx, runID, c); err != nil {
				return err
			}
			if len(load) == 0 {
				return fmt.Errorf("run %d config %d: no expert counts", runID, c)
			}
			for _, l := range load {
				if l.Steps < int64(steps) {
					return fmt.Errorf("run %d config %d layer %d: counts cover %d of %d steps so far", runID, c, l.Layer, l.Steps, steps)
				}
			}
			return nil
		})
		byLayer := map[int]store.LayerTotals{}
		for _, lt := range totals {
			byLayer[lt.Layer] = lt
		}
		checked := 0
		var all, missed int64
		for _, l := range load {
			var demand, miss int64
			for e := range l.Demand {
				demand += l.Demand[e]
				miss += l.Miss[e]
			}
			if l.Steps != int64(steps) {
				t.Errorf("run %d config %d layer %d: counts cover %d steps, the samples %d", runID, c, l.Layer, l.Steps, steps)
			}
			lt := byLayer[l.Layer]
			if lt.Hits+lt.Misses == 0 {
				continue // a store that does not report hits (resident)
			}
			checked++
			all, missed = all+demand, missed+miss
			if demand != lt.Hits+lt.Misses || miss != lt.Misses {
				t.Errorf("run %d config %d layer %d: %d demands, %d misses; the samples: %d hits, %d misses", runID, c, l.Layer, demand, miss, lt.Hits, lt.Misses)
			}
		}
		t.Logf("run %d config %d: %d layers with expert counts over %d steps, %d checked against the samples (%d demands, %d misses)", runID, c, len(load), steps, checked, all, missed)
	}
}

// fakeSysfs writes a device root with the host's /proc files (so the
// fingerprint stays placeable) plus one thermal zone at tempMilliC and a
// discharging battery at 77 %, for device.Options.Root.
func fakeSysfs(t *testing.T, tempMilliC int) string {
	t.Helper()
	root := t.TempDir()
	files := map[string]string{
		"sys/class/thermal/thermal_zone0/type":    "cpu-big\n",
		"sys/class/thermal/thermal_zone0/temp":    strconv.Itoa(tempMilliC) + "\n",
		"sys/class/power_supply/battery/type":     "Battery\n",
		"sys/class/power_supply/battery/capacity": "77\n",
		"sys/class/power_supply/battery/status":   "Discharging\n",
		"sys/class/power_supply/battery/temp":     "331\n",
	}
	for _, p := range []string{"proc/cpuinfo", "proc/meminfo", "proc/sys/kernel/osrelease", "etc/os-release"} {
		if b, err := os.ReadFile("/" + p); err == nil {
			files[p] = string(b)
		}
	}
	for p, data := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// TestE2EDeviceTrace: an agent whose device reports a thermal zone and a
// battery runs the smoke suite; the coordinator stores the state of the
// heartbeats that renewed the run's lease, and the run's device trace
// serves them. An agent with no sensors (this host) leaves none.
func TestE2EDeviceTrace(t *testing.T) {
	// Heartbeats every second, and a run long enough for several of them
	// (a smoke run alone can finish before the first on a quiet machine).
	f := newE2EFarmWith(t, e2eDeps{}, coordinator.Config{HeartbeatTTL: 3 * time.Second})
	startAgent(t, Config{NATSURL: f.url, Name: "trace-a", Labels: map[string]string{"pool": "hot"},
		DeviceOptions: &device.Options{Root: fakeSysfs(t, 47250)}})
	ctx := context.Background()
	spec := *f.spec
	spec.Repetitions = 1000
	_, runs, err := f.c.Store().CreateRuns(ctx, &store.CreateRunsParams{Spec: &spec, Build: "trace", Source: "test",
		Selector: &jobs.Selector{Labels: map[string]string{"pool": "hot"}}})
	if err != nil {
		t.Fatal(err)
	}
	id := runs[0].ID
	var pts []store.DeviceStatePoint
	var n int
	testenv.Eventually(t, 2*time.Minute, 100*time.Millisecond, func() error {
		pts, n, err = f.c.Store().DeviceTrace(ctx, id, 600)
		if err != nil || n < 2 {
			return fmt.Errorf("device trace: %d samples, err %v (the run's heartbeats carry a thermal zone)", n, err)
		}
		return nil
	})
	for _, p := range pts {
		if p.MaxTempC == nil || *p.MaxTempC != 47.25 || p.BatteryPercent == nil || *p.BatteryPercent != 77 ||
			p.BatteryTempC == nil || math.Abs(*p.BatteryTempC-33.1) > 1e-4 || p.Charging == nil || *p.Charging {
			t.Fatalf("device state %+v", p)
		}
	}
	t.Logf("run %d: %d device-state samples from heartbeats", id, n)
}
