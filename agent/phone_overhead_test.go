package agent

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/agent/adb"
	"github.com/lesfarm/lesfarm/agent/adb/adbtest"
	"github.com/lesfarm/lesfarm/jobs"
	"github.com/lesfarm/lesfarm/protocol"
)

// BenchmarkPhoneConfigVsLocalQEMU measures the goal of issue 32 side by
// side: one les-ladder config (lookahead, 50% budget, cut short as in
// TestE2EPhonesOverADB) run by the same linux/arm64 build locally under
// qemu-aarch64 (RunChild), then on a fake phone with the phone's hygiene
// around it (phoneConfig: state snapshots and reference microbenchmarks
// before and after, the runner over adb shell). It reports both walls and
// their difference, the agent's overhead per config on a phone.
func BenchmarkPhoneConfigVsLocalQEMU(b *testing.B) {
	adbtest.RequireQEMU(b)
	qemu, err := exec.LookPath("qemu-aarch64")
	if err != nil {
		b.Fatal(err)
	}
	model := trainedModel(b)
	exe := adbtest.BuildLesfarmARM64(b)
	local := filepath.Join(b.TempDir(), "runner-qemu")
	if err := os.WriteFile(local, []byte("#!/bin/sh\nexec "+qemu+" "+exe+" \"$@\"\n"), 0o755); err != nil {
		b.Fatal(err)
	}
	spec, err := jobs.Builtin("les-ladder")
	if err != nil {
		b.Fatal(err)
	}
	spec.Matrix = jobs.Matrix{Modes: []jobs.Mode{jobs.ModeLookahead}, Budgets: spec.Matrix.Budgets[1:2]}
	spec.Prompts = jobs.Prompts{Inline: []string{"In the beginning God created"}}
	spec.PrefillTokens, spec.DecodeTokens, spec.Repetitions, spec.Warmup, spec.Cooldown = 4, 8, 3, 0, 0
	configs := spec.Expand()

	f := adbtest.NewFarm(b)
	f.AddPhone(b, "P", adbtest.Phone{})
	ctx := context.Background()
	a := &Agent{log: slog.New(slog.DiscardHandler), fp: &protocol.Fingerprint{},
		// The fake phone computes on the loaded host: its reference
		// microbenchmark varies with the host's load, which the throttle
		// detector would take for throttling and answer with a cool-down
		// (up to 2 m) and a re-run. That is hygiene, not overhead; the
		// reference microbenchmarks still run.
		cfg: Config{Phone: &PhoneConfig{ADB: f.Client, Serial: "P", Hygiene: PhoneHygiene{ThrottleRatio: 1000}}}}
	if err := a.attachPhone(ctx); err != nil {
		b.Fatal(err)
	}
	onPhone := func(local, dir string, exec bool) string {
		sum, err := fileSHA256(local)
		if err != nil {
			b.Fatal(err)
		}
		st, err := os.Stat(local)
		if err != nil {
			b.Fatal(err)
		}
		size := st.Size()
		in, err := adb.Install(ctx, f.Client, "P", adb.InstallSpec{Local: local, SHA256: sum, Size: size, Dir: dir, Exec: exec})
		if err != nil {
			b.Fatal(err)
		}
		return in.Path
	}
	phoneExe := onPhone(exe, phoneBinDir, true)
	phoneModel := onPhone(model, phoneModelDir, false)
	r := &Runner{Threads: 1, Gate: ThermalGate{Disabled: true}, WorkDir: b.TempDir(), Logger: slog.New(slog.DiscardHandler)}
	rp := *r
	rp.WorkDir = phoneWorkDir
	var localWall, phoneWall time.Duration
	for b.Loop() {
		agg := telemetryEncoder(b)
		t0 := time.Now()
		res, _, err := r.RunChild(ctx, local, &Job{Spec: spec, Configs: configs, ModelPath: model, Sink: agg, Position: agg.SetPosition}, ChildLimits{})
		localWall += time.Since(t0)
		if err != nil || len(res) != 1 || res[0].Error != "" {
			b.Fatalf("local: %v %+v", err, res)
		}
		agg = telemetryEncoder(b)
		t0 = time.Now()
		pres, err := a.phoneConfig(ctx, &rp, &Job{Spec: spec, Configs: configs, ModelPath: phoneModel, Sink: agg, Position: agg.SetPosition}, phoneExe, &protocol.Provenance{})
		phoneWall += time.Since(t0)
		if err != nil || pres.Error != "" || pres.PhoneState == nil {
			b.Fatalf("phone: %v %+v", err, pres)
		}
	}
	n := float64(b.N)
	b.ReportMetric(localWall.Seconds()/n, "local-qemu-s/config")
	b.ReportMetric(phoneWall.Seconds()/n, "phone-s/config")
	b.ReportMetric((phoneWall-localWall).Seconds()/n, "overhead-s/config")
}
