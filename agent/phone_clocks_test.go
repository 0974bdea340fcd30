package agent

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lesfarm/lesfarm/agent/adb"
	"github.com/lesfarm/lesfarm/agent/adb/adbtest"
	"github.com/lesfarm/lesfarm/coordinator/fit"
	"github.com/lesfarm/lesfarm/jobs"
	"github.com/lesfarm/lesfarm/protocol"
)

func TestPhonePinCPUs(t *testing.T) {
	three := []protocol.CPUCluster{ // a 1+3+4 phone, listed out of order
		{CPUs: []int{7}, MaxKHz: 3300000},
		{CPUs: []int{0, 1, 2, 3}, MaxKHz: 2000000},
		{CPUs: []int{4, 5, 6}, MaxKHz: 2800000},
	}
	two := []protocol.CPUCluster{{CPUs: []int{0, 1, 2, 3}, MaxKHz: 1804800}, {CPUs: []int{4, 5, 6, 7}, MaxKHz: 2803200}}
	tests := []struct {
		name     string
		clusters []protocol.CPUCluster
		sel      string
		want     []int
		wantErr  string
		wantMask string
	}{
		{"none", three, "none", nil, "", ""},
		{"unset", three, "", nil, "", ""},
		{"little", three, PinLittle, []int{0, 1, 2, 3}, "", "f"},
		{"big is the fastest cluster of more than one core", three, PinBig, []int{4, 5, 6}, "", "70"},
		{"prime", three, PinPrime, []int{7}, "", "80"},
		{"index 1", three, "1", []int{4, 5, 6}, "", "70"},
		{"big of two clusters", two, PinBig, []int{4, 5, 6, 7}, "", "f0"},
		{"index out of range", two, "2", nil, "has 2 clusters", ""},
		{"unknown name", two, "medium", nil, "use none, little, big, prime", ""},
		{"no clusters read", nil, PinBig, nil, "no cpufreq cluster", ""},
		{"one core each", []protocol.CPUCluster{{CPUs: []int{0}, MaxKHz: 1}, {CPUs: []int{1}, MaxKHz: 2}}, PinBig, []int{1}, "", "2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := PinCPUs(tc.clusters, tc.sel)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("PinCPUs = %v, %v; want %v", got, err, tc.want)
			}
			if tc.wantMask != "" && cpuMask(got) != tc.wantMask {
				t.Fatalf("mask %s, want %s", cpuMask(got), tc.wantMask)
			}
		})
	}
}

// attachFake attaches a bare Agent to a fake phone with hygiene h.
func attachFake(t *testing.T, f *adbtest.Farm, serial string, h PhoneHygiene) (*Agent, error) {
	t.Helper()
	h.NoRefBench = true
	a := &Agent{log: testLogger(), fp: &protocol.Fingerprint{}, runner: &Runner{Logger: testLogger()},
		cfg: Config{Labels: map[string]string{"pool": "phones"}, Phone: &PhoneConfig{ADB: f.Client, Serial: serial, Hygiene: h}}}
	return a, a.attachPhone(context.Background())
}

// TestPhoneClocksLabel: an attached phone labels its device with the
// clock state it can hold, so that a run whose selector requires locked
// clocks is placed only on phones that lock them (the scheduler's
// reason names the label), and an agent that must lock and cannot refuses
// to attach.
func TestPhoneClocksLabel(t *testing.T) {
	f := adbtest.NewFarm(t)
	f.AddPhone(t, "ROOT", adbtest.Phone{Rooted: true})
	f.AddPhone(t, "PLAIN", adbtest.Phone{})
	locked := &jobs.Selector{Labels: map[string]string{PhoneClocksLabel: protocol.ClocksLocked}}
	tests := []struct {
		serial, clocks string
		require        bool
		want           string
		wantErr        string
	}{
		{"ROOT", "lock", false, protocol.ClocksLocked, ""},
		{"PLAIN", "lock", false, protocol.ClocksFixedPerformance, ""},
		{"PLAIN", "fixed-performance", false, protocol.ClocksFixedPerformance, ""},
		{"PLAIN", "free", false, protocol.ClocksFree, ""},
		{"PLAIN", "lock", true, "", "locked clocks are required"},
		{"ROOT", "fixed-performance", true, "", "--adb-clocks lock"},
	}
	for _, tc := range tests {
		t.Run(tc.serial+"/"+tc.clocks, func(t *testing.T) {
			a, err := attachFake(t, f, tc.serial, PhoneHygiene{Clocks: tc.clocks, RequireLocked: tc.require})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("attach err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := a.cfg.Labels[PhoneClocksLabel]; got != tc.want || a.cfg.Labels["pool"] != "phones" {
				t.Fatalf("labels %v, want clocks=%s next to pool=phones", a.cfg.Labels, tc.want)
			}
			ok, why := fit.Match(locked, &fit.Device{ID: "ph-" + tc.serial, Labels: a.cfg.Labels})
			if ok != (tc.want == protocol.ClocksLocked) || (!ok && why != "label clocks=locked missing") {
				t.Fatalf("a locked-clocks run on a %s phone: placed %v (%q)", tc.want, ok, why)
			}
			if gov := readFake(t, f, tc.serial, "root/sys/devices/system/cpu/cpufreq/policy4/scaling_governor"); gov != "schedutil" {
				t.Fatalf("governor %q after the probe at attach, want it restored to schedutil", gov)
			}
		})
	}
}

// TestPhoneConfigsRecordClocksAndPin: every result carries the clock state
// that held and the cluster the runner was pinned to; free clocks are
// flagged; a rooted phone's locked clocks are restored after the run;
// a run whose selector requires locked clocks is refused on a phone that
// cannot lock them. The battery gate refuses each config, so no runner
// runs and the results show what the agent recorded around it.
func TestPhoneConfigsRecordClocksAndPin(t *testing.T) {
	f := adbtest.NewFarm(t)
	f.AddPhone(t, "ROOT", adbtest.Phone{Rooted: true, Battery: 10})
	f.AddPhone(t, "PLAIN", adbtest.Phone{Battery: 10})
	tests := []struct {
		name, serial, clocks, pin string
		selector                  map[string]string
		wantClocks                string
		wantKHz                   int64
		wantCPUs                  []int
		wantFree                  bool
		wantErr                   string
	}{
		{"free clocks, little", "PLAIN", "free", PinLittle, nil, protocol.ClocksFree, 0, []int{0, 1, 2, 3}, true, ""},
		{"locked, big", "ROOT", "lock", PinBig, nil, protocol.ClocksLocked, 1401600, []int{4, 5, 6, 7}, false, ""},
		{"fixed performance, unpinned", "PLAIN", "fixed-performance", "", nil, protocol.ClocksFixedPerformance, 0, nil, false, ""},
		{"pool requires locked", "PLAIN", "lock", "", map[string]string{PhoneClocksLabel: protocol.ClocksLocked}, "", 0, nil, false, "locked clocks are required"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, err := attachFake(t, f, tc.serial, PhoneHygiene{Clocks: tc.clocks, Pin: tc.pin})
			if err != nil {
				t.Fatal(err)
			}
			spec := &jobs.Spec{Devices: jobs.Selector{Labels: tc.selector}}
			job := &Job{Spec: spec, Configs: []jobs.Config{{Index: 0, Key: "a"}, {Index: 1, Key: "b"}}}
			res, err := a.phoneConfigs(context.Background(), job, noRunnerExe, adb.RemoteDir+"/models/none.gguf", &protocol.Provenance{})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || len(res) != 0 {
					t.Fatalf("%d results, err %v; want %q", len(res), err, tc.wantErr)
				}
				return
			}
			if err != nil || len(res) != 2 {
				t.Fatalf("%d results, err %v", len(res), err)
			}
			for _, r := range res {
				ps := r.PhoneState
				if !strings.Contains(r.Error, "battery at 10%") || ps.Clocks != tc.wantClocks || ps.LockedKHz != tc.wantKHz ||
					!slices.Equal(ps.PinnedCPUs, tc.wantCPUs) || ps.Pin != cmp.Or(tc.pin, protocol.PinNone) ||
					slices.Contains(ps.Flags, protocol.PhoneFlagFreeClocks) != tc.wantFree {
					t.Fatalf("config %s: error %q, phone state %+v", r.ConfigKey, r.Error, ps)
				}
				if err := ps.Validate(); err != nil {
					t.Fatal(err)
				}
			}
			if gov := readFake(t, f, tc.serial, "root/sys/devices/system/cpu/cpufreq/policy4/scaling_governor"); gov != "schedutil" {
				t.Fatalf("governor %q after the run, want schedutil", gov)
			}
		})
	}
}

// TestPhoneRestoresClocksAfterCrash: an agent that locked a rooted
// phone's clocks and was killed (SIGKILL runs no restore: the phone keeps
// the userspace governor and the record of what was changed) has them
// restored by the next agent that attaches the phone, whatever its own
// clock setting.
func TestPhoneRestoresClocksAfterCrash(t *testing.T) {
	f := adbtest.NewFarm(t)
	f.AddPhone(t, "ROOT", adbtest.Phone{Rooted: true})
	a, err := attachFake(t, f, "ROOT", PhoneHygiene{Clocks: "lock"})
	if err != nil {
		t.Fatal(err)
	}
	state, khz, _, err := a.setPhoneClocks(context.Background(), true) // the run's lock; its restore never runs
	if err != nil || state != protocol.ClocksLocked || khz != 1401600 {
		t.Fatalf("lock: %s %d %v", state, khz, err)
	}
	pol := "root/sys/devices/system/cpu/cpufreq/policy4/"
	if g := readFake(t, f, "ROOT", pol+"scaling_governor"); g != "userspace" {
		t.Fatalf("governor %q while locked", g)
	}
	saved := filepath.Join(f.Dir, "ROOT", "root", adb.RemoteDir, "clocks.saved")
	if _, err := os.Stat(saved); err != nil {
		t.Fatalf("no record of the lock on the phone: %v", err)
	}
	if _, err := attachFake(t, f, "ROOT", PhoneHygiene{Clocks: "free"}); err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]string{"scaling_governor": "schedutil", "scaling_min_freq": "300000", "scaling_max_freq": "2803200"} {
		if got := readFake(t, f, "ROOT", pol+file); got != want {
			t.Fatalf("%s %q after the next attach, want %s", file, got, want)
		}
	}
	if _, err := os.Stat(saved); !os.IsNotExist(err) {
		t.Fatalf("the lock's record is still on the phone: %v", err)
	}
}

// TestPhoneNoExec: a phone whose /data/local/tmp is mounted noexec fails
// the config with an error that says so, not a protocol error. The
// calibrate suite is refused on a phone's device.
func TestPhoneNoExec(t *testing.T) {
	f := adbtest.NewFarm(t)
	f.AddPhone(t, "NOEXEC", adbtest.Phone{NoExec: true})
	a, err := attachFake(t, f, "NOEXEC", PhoneHygiene{})
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(t.TempDir(), "runner.sh")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\necho never\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	inst, err := adb.Install(context.Background(), f.Client, "NOEXEC", adb.InstallSpec{Local: exe, SHA256: sha256File(t, exe), Size: 21, Dir: phoneBinDir, Exec: true})
	if err != nil {
		t.Fatal(err)
	}
	// The calibrate suite would measure the host: a phone's agent refuses
	// it and names the command that measures the phone.
	a.cfg.Name = "ph-NOEXEC"
	if _, err := a.calibrate(context.Background(), &protocol.Assignment{}, "", nil); err == nil || !strings.Contains(err.Error(), "lesfarm profile measure --adb NOEXEC --upload --device ph-NOEXEC") {
		t.Fatalf("calibrate suite on a phone: err %v", err)
	}
	job := &Job{Spec: &jobs.Spec{}, Configs: []jobs.Config{{Index: 0, Key: "a"}}, ModelPath: adb.RemoteDir + "/models/none.gguf"}
	_, err = a.runConfigOnPhone(context.Background(), a.runner, job, inst.Path, &protocol.Provenance{})
	if err == nil || !strings.Contains(err.Error(), "cannot execute "+inst.Path) || !strings.Contains(err.Error(), "mounted noexec") {
		t.Fatalf("err %v, want the noexec error", err)
	}
}

func readFake(t *testing.T, f *adbtest.Farm, serial, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(f.Dir, serial, name))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func sha256File(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
