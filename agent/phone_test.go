package agent

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/agent/adb"
	"github.com/lesfarm/lesfarm/agent/adb/adbtest"
	"github.com/lesfarm/lesfarm/jobs"
	"github.com/lesfarm/lesfarm/protocol"
)

// TestPhoneBatteryGate: a fake phone below the 25% gate, on USB power and
// charging, has its config refused with the reason before any runner
// starts, and the refused result carries the phone's flags.
func TestPhoneBatteryGate(t *testing.T) {
	f := adbtest.NewFarm(t)
	tests := []struct {
		serial    string
		phone     adbtest.Phone
		battery   int
		wantWhy   string
		wantFlags []string
	}{
		{"LOW", adbtest.Phone{}, 24, "battery at 24% (charging), below the 25% gate", nil},
		{"EMPTY", adbtest.Phone{Debuggable: true, Emulator: true}, 3, "battery at 3% (charging)", []string{protocol.PhoneFlagEmulator, protocol.PhoneFlagDebuggable}},
	}
	for _, tc := range tests {
		t.Run(tc.serial, func(t *testing.T) {
			f.AddPhone(t, tc.serial, tc.phone)
			f.SetBattery(t, tc.serial, tc.battery)
			a := &Agent{log: testLogger(), fp: &protocol.Fingerprint{},
				cfg: Config{Phone: &PhoneConfig{ADB: f.Client, Serial: tc.serial, Hygiene: PhoneHygiene{NoRefBench: true}}}}
			ctx := context.Background()
			if err := a.attachPhone(ctx); err != nil {
				t.Fatal(err)
			}
			job := &Job{Configs: []jobs.Config{{Index: 0, Key: "lookahead/budget=50%"}}}
			res, err := a.phoneConfig(ctx, nil, job, noRunnerExe, &protocol.Provenance{})
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(res.Error, tc.wantWhy) || res.InvalidReason != res.Error {
				t.Fatalf("result error %q invalid %q, want %q", res.Error, res.InvalidReason, tc.wantWhy)
			}
			ps := res.PhoneState
			if ps == nil || ps.Start == nil || *ps.Start.BatteryPercent != float64(tc.battery) || !*ps.Start.Charging {
				t.Fatalf("phone state %+v", ps)
			}
			for _, fl := range tc.wantFlags {
				if !slices.Contains(ps.Flags, fl) {
					t.Fatalf("flags %v lack %s", ps.Flags, fl)
				}
			}
			if len(tc.wantFlags) == 0 && len(ps.Flags) != 0 {
				t.Fatalf("flags %v on a user build of a real phone", ps.Flags)
			}
			if n := f.Calls(`"` + tc.serial + `" "shell" "-T"`); n != 0 {
				t.Fatalf("%d runner sessions started on a refused config", n)
			}
		})
	}
}

// noRunnerExe is an executable path no refused config may run.
const noRunnerExe = "/data/local/tmp/lesfarm/bin/never"

func TestBatteryGate(t *testing.T) {
	pct := func(v float64) *float64 { return &v }
	no := false
	tests := []struct {
		name    string
		s       protocol.PhoneSnapshot
		min     float64
		wantWhy string
	}{
		{"at the gate", protocol.PhoneSnapshot{BatteryPercent: pct(25)}, 25, ""},
		{"just below", protocol.PhoneSnapshot{BatteryPercent: pct(24.9), Charging: &no}, 25, "battery at 25% (not charging), below the 25% gate"},
		{"unreadable", protocol.PhoneSnapshot{}, 25, ""},
		{"gate off", protocol.PhoneSnapshot{BatteryPercent: pct(1)}, -1, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := batteryGate(&tc.s, tc.min); !strings.HasPrefix(got, tc.wantWhy) || (tc.wantWhy == "") != (got == "") {
				t.Fatalf("batteryGate = %q, want %q", got, tc.wantWhy)
			}
		})
	}
}

// TestRunPhonesUnusable: phones adb lists as unauthorized, offline or in
// recovery, and one whose getprop is garbage, each get a status that says
// why and no farm device; an adb that cannot be run is an error at once.
func TestRunPhonesUnusable(t *testing.T) {
	f := adbtest.NewFarm(t)
	want := map[string]string{
		"UNAUTH":  "accept the USB debugging",
		"OFF":     "offline: reconnect",
		"RECOV":   "not booted into Android",
		"GARBAGE": "getprop printed no [key]: [value] line",
	}
	f.AddPhone(t, "UNAUTH", adbtest.Phone{State: adb.StateUnauthorized})
	f.AddPhone(t, "OFF", adbtest.Phone{State: adb.StateOffline})
	f.AddPhone(t, "RECOV", adbtest.Phone{State: adb.StateRecovery})
	f.AddPhone(t, "GARBAGE", adbtest.Phone{Props: "\x00\xff garbage\n[[[\n"})
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan []PhoneStatus, 16)
	done := make(chan error, 1)
	base := Config{NATSURL: "nats://127.0.0.1:1", Name: "ph", CacheDir: t.TempDir(), Logger: testLogger()}
	go func() {
		done <- RunPhones(ctx, PhonesConfig{Base: base, ADB: f.Client, Poll: 50 * time.Millisecond,
			OnChange: func(s []PhoneStatus) { got <- s }})
	}()
	defer func() { cancel(); <-done }()
	deadline := time.After(30 * time.Second)
	for {
		var last []PhoneStatus
		select {
		case last = <-got:
		case <-deadline:
			t.Fatal("not every unusable phone got its reason within 30 s")
		}
		ok := len(last) == len(want)
		for _, s := range last {
			if s.Running || !strings.Contains(s.Error, want[s.Serial]) {
				ok = false
			}
		}
		if ok {
			break
		}
	}
	bad := &adb.Client{Path: filepath.Join(t.TempDir(), "no-adb")}
	if err := RunPhones(context.Background(), PhonesConfig{Base: base, ADB: bad}); err == nil || !strings.Contains(err.Error(), "install Debian's adb package") {
		t.Fatalf("adb missing: err %v", err)
	}
}
