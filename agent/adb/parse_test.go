package adb

import (
	"testing"
	"time"
)

func TestParseDevices(t *testing.T) {
	tests := []struct {
		in      string
		want    []Device
		wantErr bool
	}{
		{"List of devices attached\nA1\tdevice\nB2\tunauthorized\n\n", []Device{{"A1", "device"}, {"B2", "unauthorized"}}, false},
		{"* daemon not running; starting now at tcp:5037\n* daemon started successfully\nList of devices attached\n192.168.1.5:5555\toffline\n", []Device{{"192.168.1.5:5555", "offline"}}, false},
		{"List of devices attached\nC3\tno permissions (user in plugdev group; are your udev rules wrong?)\n", []Device{{"C3", "no permissions (user in plugdev group; are your udev rules wrong?)"}}, false},
		{"List of devices attached\n", nil, false},
		{"adb: command not found\n", nil, true},
	}
	for _, tc := range tests {
		got, err := ParseDevices(tc.in)
		if (err != nil) != tc.wantErr || len(got) != len(tc.want) {
			t.Fatalf("%q: %v %v", tc.in, got, err)
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Fatalf("%q: %v, want %v", tc.in, got, tc.want)
			}
		}
	}
}

func TestParseBatteryAndThermal(t *testing.T) {
	tests := []struct {
		in              string
		pct, temp       float64
		charging, valid bool
	}{
		{"  AC powered: false\n  USB powered: false\n  status: 3\n  level: 20\n  scale: 100\n  temperature: 315\n", 20, 31.5, false, true},
		{"  USB powered: true\n  status: 2\n  level: 40\n  scale: 50\n  temperature: 250\n", 80, 25, true, true},
		{"Can't find service: battery\n", 0, 0, false, false},
	}
	for _, tc := range tests {
		b, err := ParseBattery(tc.in)
		if (err == nil) != tc.valid {
			t.Fatalf("%q: err %v", tc.in, err)
		}
		if tc.valid && (*b.Percent != tc.pct || *b.TempC != tc.temp || *b.Charging != tc.charging) {
			t.Fatalf("%q: %v %v %v", tc.in, *b.Percent, *b.TempC, *b.Charging)
		}
	}
	th, err := ParseThermal("Thermal Status: 3\nTemperature{mValue=51.2, mType=0, mName=cpu}\nTemperature{mValue=-273, mType=0}\nThermal headroom: 0.95\n")
	if err != nil || *th.Status != 3 || *th.MaxTempC != 51.2 || *th.Headroom != 0.95 {
		t.Fatalf("thermal %+v err %v", th, err)
	}
	if _, err := ParseThermal("garbage"); err == nil {
		t.Fatal("garbage parsed as a thermal status")
	}
}

func TestParseDF(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"Filesystem     1K-blocks    Used Available Use% Mounted on\n/dev/block/dm-5 114304312 60123 54180256  53% /data\n", 54180256 * 1024, true},
		{"Filesystem 1K-blocks Used Available Use% Mounted on\n/dev/block/bootdevice/by-name/userdata\n 100 50 50 50% /data\n", 50 * 1024, true},
		{"df: /data: Permission denied\n", 0, false},
	}
	for _, tc := range tests {
		got, err := ParseDFAvailable(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Fatalf("%q: %d %v", tc.in, got, err)
		}
	}
}

// FuzzPhoneParsers: nothing a phone prints crashes the parsers, and what
// they accept passes the result's validation.
func FuzzPhoneParsers(f *testing.F) {
	f.Add("[ro.product.model]: [Pixel]\n@@meminfo\nMemTotal: 1 kB\n@@df\nFilesystem 1K-blocks Used Available\nx 1 1 1\n@@cpufreq\n/sys/devices/system/cpu/cpu0/cpufreq/x 100\n")
	f.Add("@@battery\nlevel: 50\nscale: 0\ntemperature: 1e308\n@@thermal\nThermal Status: 9\nheadroom -1e999\n@@cpu\npolicy a\ncpus 0 1 -2 99999\ngov x\ncur -1\ntis 1 2\ntis x y\n@@zones\nzone a 99999999\n")
	f.Add("List of devices attached\nX\tdevice\n")
	f.Fuzz(func(t *testing.T, s string) {
		_, _ = ParseDevices(s)
		if fp, _, err := ParseFingerprint("S", s); err == nil && fp.DeviceModel == "" {
			t.Fatal("a fingerprint without a model")
		}
		snap := ParseSnapshot(s, time.Unix(0, 0))
		if err := (&phoneStateCheck{snap}).validate(); err != nil {
			t.Fatalf("snapshot %+v fails validation: %v", snap, err)
		}
		_, _ = ParseDFAvailable(s)
	})
}
