package agent

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/jobs"
	"github.com/lesfarm/lesfarm/profile"
	"github.com/lesfarm/lesfarm/protocol"
	"github.com/lesfarm/lesfarm/runtime/calibrate"
)

// smallCalibration keeps the measurement CI-sized: a 16 MiB test file, a
// 2 × 2 read grid of 10 ms cells and an 8 MiB copy.
func smallCalibration() *calibrate.Config {
	return &calibrate.Config{FileBytes: 16 << 20, BlockSizes: []int64{4 << 10, 256 << 10}, QueueDepths: []int{1, 4}, CellTime: 10 * time.Millisecond, CopyBytes: 8 << 20}
}

// TestE2ECalibrateSuite: a run of the built-in calibrate suite on a host
// agent (real coordinator, Postgres and NATS) measures the device, uploads
// its profile through the coordinator's REST API, and reports the figures
// as the run's result; the stored profile parses with the --profile FILE
// parser, carries the measured service-time table, and an agent started
// with it is the device's emulated twin.
func TestE2ECalibrateSuite(t *testing.T) {
	f := newE2EFarm(t)
	ctx := context.Background()
	token, _, err := f.c.Store().CreateAPIToken(ctx, "calibrate-e2e")
	if err != nil {
		t.Fatal(err)
	}
	startAgent(t, Config{NATSURL: f.url, Name: "e2e-cal", ServerURL: f.c.HTTPURL(), ArtifactToken: token, Calibration: smallCalibration()})
	spec, err := jobs.Builtin(jobs.SuiteCalibrate)
	if err != nil {
		t.Fatal(err)
	}
	_, runs, err := f.c.Store().CreateRuns(ctx, &store.CreateRunsParams{Spec: spec, Build: "e2e", Fanout: true, Source: "test"})
	if err != nil || len(runs) != 1 {
		t.Fatalf("runs %v, err %v", runs, err)
	}
	done := f.waitRun(t, runs[0].ID, store.RunSucceeded, 3*time.Minute)
	if done.DeviceID != "e2e-cal" {
		t.Fatalf("ran on %s", done.DeviceID)
	}
	res, err := f.c.Store().ListResults(ctx, &store.ListResultsParams{RunID: runs[0].ID, Limit: 10})
	if err != nil || len(res) != 1 {
		t.Fatalf("results %v, err %v", res, err)
	}

	stored, err := f.c.Store().GetDeviceProfile(ctx, "e2e-cal")
	if err != nil {
		t.Fatalf("no profile stored for the device: %v", err)
	}
	p, err := profile.Parse([]byte(stored.YAML))
	if err != nil {
		t.Fatalf("stored profile does not parse: %v\n%s", err, stored.YAML)
	}
	// The grid's two sizes and the suite model's expert read.
	if p.Name != "e2e-cal" || p.Compute == nil || p.Bandwidth <= 0 || p.Service == nil || len(p.Service.Sizes) != 3 || len(p.Service.QueueDepths) != 2 {
		t.Fatalf("stored profile %+v (service %+v): want the device's name, compute and a 3 × 2 table", p, p.Service)
	}

	// The twin: an agent emulating the stored profile.
	file := filepath.Join(t.TempDir(), "twin.yaml")
	if err := calibrate.WriteFile(file, []byte(stored.YAML)); err != nil {
		t.Fatal(err)
	}
	twin, err := New(Config{NATSURL: f.url, Name: "twin-of-e2e-cal", CacheDir: t.TempDir(), Profile: file})
	if err != nil {
		t.Fatal(err)
	}
	if fp := twin.Fingerprint(); !fp.Emulated || fp.Profile != "e2e-cal" {
		t.Fatalf("twin fingerprint emulated=%v profile=%q, want the measured device's", fp.Emulated, fp.Profile)
	}
}

// TestCalibrateRefusals: an emulated agent and one without a coordinator
// URL refuse the calibrate suite with a one-line error, before measuring.
func TestCalibrateRefusals(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"emulated", Config{Profile: "phone-mid", ServerURL: "http://127.0.0.1:1"}, "emulates profile phone-mid"},
		{"no server", Config{}, "--server"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.NATSURL, tc.cfg.Name, tc.cfg.CacheDir = "nats://unused", "cal-refuse", t.TempDir()
			a, err := New(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			_, err = a.calibrate(context.Background(), &protocol.Assignment{}, "", nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("err = %v, want one line mentioning %q", err, tc.want)
			}
		})
	}
}
