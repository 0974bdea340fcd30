package adb_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lesfarm/lesfarm/agent/adb"
	"github.com/lesfarm/lesfarm/agent/adb/adbtest"
)

func TestFakePhones(t *testing.T) {
	f := adbtest.NewFarm(t)
	f.AddPhone(t, "PHONE1", adbtest.Phone{Model: "Pixel 8 Pro", Manufacturer: "Google", SoC: "Google"})
	f.AddPhone(t, "LOCKED", adbtest.Phone{State: adb.StateUnauthorized})
	f.AddPhone(t, "GARBAGE", adbtest.Phone{Props: "\x00\xff not a property\n[[[\n"})
	f.AddPhone(t, "OFF", adbtest.Phone{State: adb.StateOffline})
	ctx := context.Background()

	ds, err := f.Client.Devices(ctx)
	if err != nil || len(ds) != 4 {
		t.Fatalf("devices %v err %v", ds, err)
	}
	tests := []struct {
		serial  string
		wantErr string
		is      error
	}{
		{"PHONE1", "", nil},
		{"LOCKED", "unauthorized", adb.ErrUnavailable},
		{"GARBAGE", "getprop printed no [key]: [value] line", nil},
		{"NOPE", "not found", adb.ErrNotFound},
		{"OFF", "device offline", adb.ErrUnavailable},
	}
	for _, tc := range tests {
		t.Run(tc.serial, func(t *testing.T) {
			fp, id, err := adb.Fingerprint(ctx, f.Client, tc.serial)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				if tc.is != nil && !errors.Is(err, tc.is) {
					t.Fatalf("err %v is not %v", err, tc.is)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if fp.DeviceModel != "Pixel 8 Pro" || fp.Manufacturer != "Google" || fp.Arch != "arm64" || fp.OSVersion != "Android 14 (SDK 34)" ||
				fp.Cores != 8 || fp.CoreMaxKHz[7] != 2803200 || fp.RAMBytes == nil || *fp.RAMBytes != 7812345*1024 ||
				fp.FreeStorageBytes == nil || fp.CPUModel != "ARM Cortex-A510 + Cortex-A715" || fp.SoC != "Google SM8550" {
				t.Fatalf("fingerprint %+v", fp)
			}
			if !strings.HasPrefix(id.BuildFingerprint, "fake/PHONE1/") || id.SDK != 34 {
				t.Fatalf("identity %+v", id)
			}
		})
	}
}

// TestNoADB: an adb executable that cannot be run is ErrNoADB, a clear
// error rather than a crash.
func TestNoADB(t *testing.T) {
	c := &adb.Client{Path: filepath.Join(t.TempDir(), "no-adb-here")}
	_, err := c.Devices(context.Background())
	if !errors.Is(err, adb.ErrNoADB) || !strings.Contains(err.Error(), "cannot be run") {
		t.Fatalf("err %v, want ErrNoADB", err)
	}
}

func TestInstallCachesBySHA256(t *testing.T) {
	f := adbtest.NewFarm(t)
	dir := f.AddPhone(t, "P", adbtest.Phone{})
	ctx := context.Background()
	local := filepath.Join(t.TempDir(), "payload")
	data := []byte(strings.Repeat("lesfarm payload ", 1000))
	if err := os.WriteFile(local, data, 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	spec := adb.InstallSpec{Local: local, SHA256: hex.EncodeToString(sum[:]), Size: int64(len(data)), Dir: adb.RemoteDir + "/models"}

	// A push broken half-way is caught by the hash check on the phone.
	if err := os.WriteFile(filepath.Join(dir, "push_truncate"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := adb.Install(ctx, f.Client, "P", spec); err == nil || !strings.Contains(err.Error(), "broken half-way") {
		t.Fatalf("truncated push: err %v", err)
	}
	if err := os.Remove(filepath.Join(dir, "push_truncate")); err != nil {
		t.Fatal(err)
	}
	for i, wantCached := range []bool{false, true} {
		got, err := adb.Install(ctx, f.Client, "P", spec)
		if err != nil || got.Cached != wantCached || got.Path != adb.RemoteDir+"/models/"+spec.SHA256 {
			t.Fatalf("install %d: %+v err %v", i, got, err)
		}
	}
	if n := f.Calls(`"push"`); n != 2 {
		t.Fatalf("%d pushes, want 2 (the broken one and one more; the cached install pushes nothing)", n)
	}
	// A file bigger than /data's free space is refused before any push.
	big := spec
	big.SHA256, big.Size = strings.Repeat("0", 64), 1<<62
	if _, err := adb.Install(ctx, f.Client, "P", big); !errors.Is(err, adb.ErrNoSpace) {
		t.Fatalf("too big: err %v", err)
	}
}

func TestSnapshotAndClocks(t *testing.T) {
	f := adbtest.NewFarm(t)
	dir := f.AddPhone(t, "R", adbtest.Phone{Rooted: true, Battery: 64, ThermalStatus: 2})
	f.AddPhone(t, "U", adbtest.Phone{})
	ctx := context.Background()
	s, err := adb.Snapshot(ctx, f.Client, "R")
	if err != nil {
		t.Fatal(err)
	}
	if *s.BatteryPercent != 64 || !*s.Charging || *s.BatteryTempC != 29.6 || *s.ThermalStatus != 2 || *s.MaxTempC != 54.5 ||
		len(s.Clusters) != 2 || s.Clusters[1].Governor != "schedutil" || s.Clusters[1].CurKHz != 2803200 || len(s.Clusters[1].TimeInState) != 4 ||
		len(s.Clusters[1].CPUs) != 4 {
		t.Fatalf("snapshot %+v", s)
	}
	if _, err := adb.LockClocks(ctx, f.Client, "U"); err == nil {
		t.Fatal("locked the clocks of an unrooted phone")
	}
	khz, err := adb.LockClocks(ctx, f.Client, "R")
	if err != nil || khz != 1401600 {
		t.Fatalf("locked at %d err %v, want 1401600 (the lowest ≥ 50%% of 2803200)", khz, err)
	}
	pol := filepath.Join(dir, "root/sys/devices/system/cpu/cpufreq/policy4")
	if b, _ := os.ReadFile(filepath.Join(pol, "scaling_governor")); strings.TrimSpace(string(b)) != "userspace" {
		t.Fatalf("governor %q after lock", b)
	}
	if ok, err := adb.RestoreClocks(ctx, f.Client, "R"); !ok || err != nil {
		t.Fatalf("restore %v %v", ok, err)
	}
	for file, want := range map[string]string{"scaling_governor": "schedutil", "scaling_max_freq": "2803200", "scaling_min_freq": "300000"} {
		if b, _ := os.ReadFile(filepath.Join(pol, file)); strings.TrimSpace(string(b)) != want {
			t.Fatalf("%s %q after restore, want %s", file, b, want)
		}
	}
	if ok, err := adb.RestoreClocks(ctx, f.Client, "R"); ok || err != nil {
		t.Fatalf("second restore %v %v: nothing was saved", ok, err)
	}
	if err := adb.SetFixedPerformance(ctx, f.Client, "U", true); err != nil {
		t.Fatal(err)
	}
	if d, err := adb.RefBench(ctx, f.Client, "U", 2000); err != nil || d <= 0 {
		t.Fatalf("refbench %v %v", d, err)
	}
}

// BenchmarkPhoneConfigOverhead measures the adb calls the agent adds
// around one config on a fake phone (agent/phonehygiene.go): the state
// snapshot with the reference microbenchmark (default 5000 iterations)
// before and after the config, and the shell session that carries the
// runner (here running `true`). It reports their sum per config.
func BenchmarkPhoneConfigOverhead(b *testing.B) {
	f := adbtest.NewFarm(b)
	f.AddPhone(b, "P", adbtest.Phone{})
	ctx := context.Background()
	for b.Loop() {
		for range 2 {
			if _, _, err := adb.SnapshotBench(ctx, f.Client, "P", 5000); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := f.Client.Shell(ctx, "P", "true"); err != nil {
			b.Fatal(err)
		}
	}
}
