package device

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lesfarm/lesfarm/protocol"
)

// writeTree writes files (path → content) under a new temp root.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, c := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

const pixelCPUInfo = `processor	: 0
BogoMIPS	: 49.15
Features	: fp asimd evtstrm aes pmull sha1 sha2 crc32
CPU implementer	: 0x41
CPU architecture: 8
CPU variant	: 0x1
CPU part	: 0xd46
CPU revision	: 1

processor	: 4
CPU implementer	: 0x41
CPU part	: 0xd4d

processor	: 8
CPU implementer	: 0x41
CPU part	: 0xd4e
`

func TestReadAndroid(t *testing.T) {
	root := writeTree(t, map[string]string{
		"proc/cpuinfo":              pixelCPUInfo,
		"proc/meminfo":              "MemTotal:       11718484 kB\nMemFree:  100 kB\nMemAvailable:    5000000 kB\n",
		"proc/sys/kernel/osrelease": "5.15.110-android14-11\n",
		"system/build.prop": "# begin build properties\nro.build.version.release=14\nro.build.version.sdk=34\n" +
			"ro.product.system.model=mainline\nro.soc.manufacturer=Google\nro.soc.model=Tensor G3\n",
		"vendor/build.prop": "ro.product.vendor.manufacturer=Google\nro.product.vendor.model=Pixel 8 Pro\n",
		"sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq": "1704000\n",
		"sys/devices/system/cpu/cpu4/cpufreq/cpuinfo_max_freq": "2367000\n",
		"sys/devices/system/cpu/cpu8/cpufreq/cpuinfo_max_freq": "2914000\n",
		"sys/class/thermal/thermal_zone0/type":                 "BIG\n",
		"sys/class/thermal/thermal_zone0/temp":                 "48500\n",
		"sys/class/thermal/thermal_zone1/type":                 "LITTLE\n",
		"sys/class/thermal/thermal_zone1/temp":                 "39000\n",
		"sys/class/thermal/thermal_zone2/type":                 "disabled\n",
		"sys/class/thermal/thermal_zone2/temp":                 "-273000\n",
		"sys/class/power_supply/battery/type":                  "Battery\n",
		"sys/class/power_supply/battery/capacity":              "0\n",
		"sys/class/power_supply/battery/status":                "Charging\n",
		"sys/class/power_supply/battery/temp":                  "312\n",
		"sys/class/power_supply/usb/type":                      "USB\n",
		"sys/class/power_supply/usb/online":                    "1\n",
	})
	fp := Read(Options{Root: root, Goos: "android", StoragePath: root})
	check := func(name, got, want string) {
		t.Helper()
		if got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	check("platform", fp.Platform, "android")
	check("os", fp.OSVersion, "Android 14 (SDK 34)")
	check("model", fp.DeviceModel, "Pixel 8 Pro")
	check("manufacturer", fp.Manufacturer, "Google")
	check("soc", fp.SoC, "Google Tensor G3")
	check("cpu", fp.CPUModel, "ARM Cortex-A510 + Cortex-A715 + Cortex-X3")
	check("kernel", fp.Kernel, "5.15.110-android14-11")
	if fp.RAMBytes == nil || *fp.RAMBytes != 11718484*1024 {
		t.Errorf("ram = %v", fp.RAMBytes)
	}
	if got := fp.CoreMaxKHz; len(got) != 3 || got[0] != 1704000 || got[2] != 2914000 {
		t.Errorf("core max = %v", got)
	}
	st := fp.State
	if len(st.Thermal) != 2 || st.Thermal[0].Name != "BIG" || st.Thermal[0].TempC != 48.5 {
		t.Errorf("thermal = %+v", st.Thermal)
	}
	if st.MaxTempC == nil || *st.MaxTempC != 48.5 {
		t.Errorf("max temp = %v", st.MaxTempC)
	}
	// A real 0 % battery must be present, not dropped as "unknown".
	if st.BatteryPercent == nil || *st.BatteryPercent != 0 {
		t.Errorf("battery = %v", st.BatteryPercent)
	}
	if st.Charging == nil || !*st.Charging {
		t.Errorf("charging = %v", st.Charging)
	}
	if st.BatteryTempC == nil || *st.BatteryTempC != 31.2 {
		t.Errorf("battery temp = %v", st.BatteryTempC)
	}
	if fp.FreeStorageBytes == nil || *fp.FreeStorageBytes <= 0 {
		t.Errorf("free storage = %v", fp.FreeStorageBytes)
	}
	if js, err := json.Marshal(fp); err != nil || !strings.Contains(string(js), `"battery_percent":0`) {
		t.Errorf("json lost the zero battery: %s (%v)", js, err)
	}
}

func TestReadLinuxUnreadableFieldsAbsent(t *testing.T) {
	root := writeTree(t, map[string]string{
		"proc/cpuinfo":                  "processor : 0\nmodel name : AMD EPYC\n",
		"etc/os-release":                "PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nNAME=Debian\n",
		"sys/class/dmi/id/product_name": "Standard PC",
	})
	fp := Read(Options{Root: root, Goos: "linux", StoragePath: filepath.Join(root, "missing")})
	if fp.Platform != "linux" || fp.CPUModel != "AMD EPYC" || fp.OSVersion != "Debian GNU/Linux 12 (bookworm)" || fp.DeviceModel != "Standard PC" {
		t.Errorf("fingerprint = %s", fpJSON(t, fp))
	}
	var m map[string]any
	if err := json.Unmarshal(fpJSON(t, fp), &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"ram_bytes", "ram_available_bytes", "free_storage_bytes", "kernel", "core_max_khz"} {
		if _, ok := m[k]; ok {
			t.Errorf("%s present although unreadable: %v", k, m[k])
		}
	}
	st := m["state"].(map[string]any)
	for _, k := range []string{"thermal", "max_temp_c", "battery_percent", "charging"} {
		if _, ok := st[k]; ok {
			t.Errorf("state.%s present although unreadable", k)
		}
	}
}

func TestEmulatedProfile(t *testing.T) {
	root := writeTree(t, map[string]string{
		"proc/cpuinfo":                  "model name : AMD EPYC\n",
		"proc/meminfo":                  "MemTotal: 24000000 kB\nMemAvailable: 20000000 kB\n",
		"sys/class/dmi/id/product_name": "Standard PC",
	})
	fp := Read(Options{Root: root, Goos: "linux", Profile: "phone-flagship", RAMBytes: 12 << 30})
	if !fp.Emulated || fp.Profile != "phone-flagship" || fp.DeviceModel != "emulated:phone-flagship" || fp.HostModel != "Standard PC" {
		t.Errorf("emulated fingerprint = %s", fpJSON(t, fp))
	}
	if *fp.RAMBytes != 12<<30 || *fp.RAMAvailableBytes != 12<<30 {
		t.Errorf("ram = %d avail = %d", *fp.RAMBytes, *fp.RAMAvailableBytes)
	}
}

func TestReadThisMachine(t *testing.T) {
	fp := Read(Options{})
	if fp.Platform == "" || fp.Cores < 1 || fp.AgentBuild == "" || fp.Arch == "" {
		t.Fatalf("fingerprint = %s", fpJSON(t, fp))
	}
	t.Logf("this machine: %s", fp)
}

func TestParseTemp(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want float64
		ok   bool
	}{
		{"45000", 45, true}, {"45", 45, true}, {"450", 45, true}, {"-273000", 0, false},
		{"", 0, false}, {"abc", 0, false}, {"999999999", 0, false},
	} {
		got, ok := ParseTemp(tc.in)
		if ok != tc.ok || (ok && got != tc.want) {
			t.Errorf("ParseTemp(%q) = %v, %v; want %v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestParseGetprop(t *testing.T) {
	m := ParseGetprop("[ro.product.model]: [Pixel 8]\n[bad line\n[ro.x]: []\n")
	if m["ro.product.model"] != "Pixel 8" || len(m) != 2 {
		t.Errorf("getprop = %v", m)
	}
}

func FuzzParsers(f *testing.F) {
	f.Add(pixelCPUInfo)
	f.Add("MemTotal: 100 kB\nMemAvailable: x\n")
	f.Add("[a]: [b]\nro.x=1\n")
	f.Add("PRETTY_NAME=\"x\n")
	f.Fuzz(func(t *testing.T, s string) {
		ParseCPUInfo(s)
		for _, v := range ParseMeminfo(s) {
			if v < 0 {
				t.Fatalf("negative meminfo value %d", v)
			}
		}
		ParseBuildProp(s)
		ParseGetprop(s)
		ParseOSRelease(s)
		if v, ok := ParseTemp(s); ok && (v < -40 || v > 200) {
			t.Fatalf("temp %v accepted", v)
		}
	})
}

func fpJSON(t *testing.T, fp *protocol.Fingerprint) []byte {
	t.Helper()
	b, err := json.Marshal(fp)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
