// Package adbtest builds the fake adb (internal/fakeadb) and lays out fake
// phones for tests of the agent's --adb mode. It is a test harness: no
// production code imports it.
package adbtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/lesfarm/lesfarm/agent/adb"
)

var built struct {
	sync.Mutex
	path string
	err  error
}

// Build compiles internal/fakeadb once per test process and returns its
// path. The binary lives in a directory that is left for the OS to clean
// (tests of one process share it).
func Build(t testing.TB) string {
	t.Helper()
	built.Lock()
	defer built.Unlock()
	if built.path == "" && built.err == nil {
		dir, err := os.MkdirTemp("", "fakeadb-")
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, "adb")
		cmd := exec.Command("go", "build", "-o", p, "github.com/lesfarm/lesfarm/internal/fakeadb")
		if out, err := cmd.CombinedOutput(); err != nil {
			built.err = fmt.Errorf("go build fakeadb: %v\n%s", err, out)
		} else {
			built.path = p
		}
	}
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.path
}

var arm64 struct {
	sync.Mutex
	path string
	err  error
}

// RequireQEMU skips t when qemu-aarch64 is missing (fake phones cannot
// run a linux/arm64 build), and fails it instead when
// LESFARM_FIXTURES=require.
func RequireQEMU(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("qemu-aarch64"); err != nil {
		if os.Getenv("LESFARM_FIXTURES") == "require" {
			t.Fatal("qemu-aarch64 is missing and LESFARM_FIXTURES=require: install Debian's qemu-user")
		}
		t.Skip("SKIP: qemu-aarch64 is not installed (Debian: apt-get install qemu-user), so the fake phones cannot run a linux/arm64 build")
	}
}

// BuildLesfarmARM64 cross-compiles ./cmd/lesfarm of this module as a
// static linux/arm64 executable, the payload fake phones run under qemu,
// once per test process (every test and benchmark of the process shares
// it), and returns its path. It is stripped (-s -w: no symbol table or
// DWARF; build info and stack traces stay): a third smaller, so the link,
// the pushes and the phone's sha256 take less.
func BuildLesfarmARM64(t testing.TB) string {
	t.Helper()
	arm64.Lock()
	defer arm64.Unlock()
	buildARM64()
	if arm64.err != nil {
		t.Fatal(arm64.err)
	}
	return arm64.path
}

// PrebuildLesfarmARM64 starts BuildLesfarmARM64's cross-build in the
// background, so that it overlaps a test's other setup (a database, a
// coordinator); BuildLesfarmARM64 then waits for it and reports its error.
func PrebuildLesfarmARM64() {
	go func() {
		arm64.Lock()
		defer arm64.Unlock()
		buildARM64()
	}()
}

// buildARM64 cross-builds lesfarm unless it was built (or failed) before;
// the caller holds arm64's lock.
func buildARM64() {
	if arm64.path == "" && arm64.err == nil {
		dir, err := os.MkdirTemp("", "lesfarm-arm64-")
		if err != nil {
			arm64.err = err
			return
		}
		p := filepath.Join(dir, "lesfarm")
		cmd := exec.Command("go", "build", "-ldflags=-s -w", "-o", p, "github.com/lesfarm/lesfarm/cmd/lesfarm")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=arm64")
		if out, err := cmd.CombinedOutput(); err != nil {
			arm64.err = fmt.Errorf("cross-compiling lesfarm for linux/arm64: %v\n%s", err, out)
		} else {
			arm64.path = p
		}
	}
}

// Farm is a directory of fake phones and the adb client that sees them.
type Farm struct {
	Dir    string
	Client *adb.Client
}

// NewFarm builds the fake adb and returns an empty farm in a temp dir.
func NewFarm(t testing.TB) *Farm {
	t.Helper()
	dir := t.TempDir()
	return &Farm{Dir: dir, Client: &adb.Client{Path: Build(t), Env: []string{"FAKEADB_DIR=" + dir}}}
}

// Phone describes a fake phone; zero fields take a plausible mid-range
// phone's values.
type Phone struct {
	Model, Manufacturer, SoC string
	// Props replaces the whole getprop output when set (garbage tests).
	Props string
	// State is what `adb devices` prints (default "device").
	State string
	// Battery is the battery level in percent (default 80).
	Battery int
	// ThermalStatus is dumpsys thermalservice's status (default 0).
	ThermalStatus int
	// Headroom, when > 0, is the thermal headroom dumpsys thermalservice
	// prints (none by default).
	Headroom float64
	Rooted   bool
	// Debuggable sets ro.debuggable=1; Emulator sets ro.kernel.qemu=1.
	Debuggable, Emulator bool
	// NoExec mounts the phone's /data/local/tmp noexec: the executables
	// pushed there fail to run (exit 126, Permission denied).
	NoExec bool
}

// AddPhone lays out phone serial.
func (f *Farm) AddPhone(t testing.TB, serial string, p Phone) string {
	t.Helper()
	dir := filepath.Join(f.Dir, serial)
	root := filepath.Join(dir, "root")
	props := p.Props
	if props == "" {
		props = fmt.Sprintf("[ro.product.manufacturer]: [%s]\n[ro.product.model]: [%s]\n[ro.soc.manufacturer]: [%s]\n[ro.soc.model]: [SM8550]\n"+
			"[ro.build.fingerprint]: [fake/%s/%s:14/UQ1A/1:user/release-keys]\n[ro.product.cpu.abi]: [arm64-v8a]\n"+
			"[ro.build.version.sdk]: [34]\n[ro.build.version.release]: [14]\n[ro.debuggable]: [0]\n",
			or(p.Manufacturer, "Fakeco"), or(p.Model, "Fake Phone"), or(p.SoC, "QTI"), serial, serial)
		if p.Debuggable {
			props = strings.Replace(props, "[ro.debuggable]: [0]", "[ro.debuggable]: [1]", 1)
		}
		if p.Emulator {
			props += "[ro.kernel.qemu]: [1]\n"
		}
	}
	files := map[string]string{
		"getprop":                props,
		"dumpsys/battery":        Battery(or0(p.Battery, 80)),
		"dumpsys/thermalservice": ThermalServiceHeadroom(p.ThermalStatus, p.Headroom),
		"root/proc/meminfo":      "MemTotal:        7812345 kB\nMemFree:         1234567 kB\nMemAvailable:    3456789 kB\n",
		"root/proc/cpuinfo":      "processor\t: 0\nCPU implementer\t: 0x41\nCPU part\t: 0xd46\n\nprocessor\t: 4\nCPU implementer\t: 0x41\nCPU part\t: 0xd4d\n",
		"root/sys/class/thermal/thermal_zone0/type": "cpu-0\n",
		"root/sys/class/thermal/thermal_zone0/temp": "38000\n",
		"root/proc/sys/vm/drop_caches":              "0\n",
	}
	if p.State != "" {
		files["state"] = p.State + "\n"
	}
	if p.Rooted {
		files["rooted"] = ""
	}
	if p.NoExec {
		files["noexec"] = ""
	}
	for cpu := range 8 {
		max := "1804800"
		if cpu >= 4 {
			max = "2803200"
		}
		files[fmt.Sprintf("root/sys/devices/system/cpu/cpu%d/cpufreq/cpuinfo_max_freq", cpu)] = max + "\n"
	}
	for _, pol := range []struct{ name, cpus, max string }{{"policy0", "0 1 2 3", "1804800"}, {"policy4", "4 5 6 7", "2803200"}} {
		d := "root/sys/devices/system/cpu/cpufreq/" + pol.name + "/"
		files[d+"related_cpus"] = pol.cpus + "\n"
		files[d+"scaling_governor"] = "schedutil\n"
		files[d+"scaling_cur_freq"] = pol.max + "\n"
		files[d+"cpuinfo_max_freq"] = pol.max + "\n"
		files[d+"scaling_min_freq"] = "300000\n"
		files[d+"scaling_max_freq"] = pol.max + "\n"
		files[d+"scaling_available_frequencies"] = "300000 998400 1401600 " + pol.max + "\n"
		files[d+"stats/time_in_state"] = "300000 100\n998400 50\n1401600 20\n" + pol.max + " 10\n"
	}
	for name, data := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(root, "data", "local", "tmp"), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// Unplug makes serial vanish from adb; Replug brings it back.
func (f *Farm) Unplug(t testing.TB, serial string) {
	t.Helper()
	f.write(t, serial, "unplugged", "")
}

// Replug attaches serial again.
func (f *Farm) Replug(t testing.TB, serial string) {
	t.Helper()
	if err := os.Remove(filepath.Join(f.Dir, serial, "unplugged")); err != nil {
		t.Fatal(err)
	}
}

// SetThermal sets serial's thermal status (0 none ... 6 shutdown) and its
// zone's temperature to match.
func (f *Farm) SetThermal(t testing.TB, serial string, status int) {
	t.Helper()
	f.write(t, serial, "dumpsys/thermalservice", ThermalService(status))
	f.write(t, serial, "root/sys/class/thermal/thermal_zone0/temp", fmt.Sprintf("%d\n", 38000+8000*status))
}

// SetHeadroom sets the thermal headroom serial's dumpsys thermalservice
// prints (at thermal status 0; 0 prints none).
func (f *Farm) SetHeadroom(t testing.TB, serial string, headroom float64) {
	t.Helper()
	f.write(t, serial, "dumpsys/thermalservice", ThermalServiceHeadroom(0, headroom))
}

// DropCaches is what the phone serial's /proc/sys/vm/drop_caches holds
// ("0" until a rooted phone's page cache was dropped, then "3").
func (f *Farm) DropCaches(serial string) string {
	b, _ := os.ReadFile(filepath.Join(f.Dir, serial, "root", "proc", "sys", "vm", "drop_caches"))
	return strings.TrimSpace(string(b))
}

// SetBattery sets serial's battery level in percent (the fixture's phone
// is always on USB power, charging).
func (f *Farm) SetBattery(t testing.TB, serial string, pct int) {
	t.Helper()
	f.write(t, serial, "dumpsys/battery", Battery(pct))
}

// Write writes a fixture file of serial (relative to its directory).
func (f *Farm) write(t testing.TB, serial, name, data string) {
	t.Helper()
	p := filepath.Join(f.Dir, serial, name)
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, p); err != nil {
		t.Fatal(err)
	}
}

// Taskset is what the phone serial ran under taskset, one "MASK NAME"
// line per command (NAME is the executable's base name).
func (f *Farm) Taskset(serial string) string {
	b, _ := os.ReadFile(filepath.Join(f.Dir, serial, "taskset"))
	return string(b)
}

// Log is the fake adb's call log (one line per call).
func (f *Farm) Log() string {
	b, _ := os.ReadFile(filepath.Join(f.Dir, "log"))
	return string(b)
}

// Calls counts the calls in the log whose arguments contain s.
func (f *Farm) Calls(s string) int {
	n := 0
	for _, l := range strings.Split(f.Log(), "\n") {
		if strings.Contains(l, s) {
			n++
		}
	}
	return n
}

// Battery is `dumpsys battery` output for a phone at pct percent on USB.
func Battery(pct int) string {
	return fmt.Sprintf("Current Battery Service state:\n  AC powered: false\n  USB powered: true\n  Wireless powered: false\n"+
		"  Max charging current: 500000\n  status: 2\n  health: 2\n  present: true\n  level: %d\n  scale: 100\n"+
		"  voltage: 4271\n  temperature: 296\n  technology: Li-ion\n", pct)
}

// ThermalService is `dumpsys thermalservice` output at status.
func ThermalService(status int) string {
	return ThermalServiceHeadroom(status, 0)
}

// ThermalServiceHeadroom is ThermalService with a thermal headroom line
// when headroom > 0.
func ThermalServiceHeadroom(status int, headroom float64) string {
	s := fmt.Sprintf("IsStatusOverride: false\nThermalEventListeners:\n\tcallbacks: 1\nThermal Status: %d\n"+
		"Cached temperatures:\n\tTemperature{mValue=%d.5, mType=0, mName=cpu0, mStatus=%d}\n"+
		"HAL Ready: true\nCurrent temperatures from HAL:\n\tTemperature{mValue=29.6, mType=2, mName=battery, mStatus=0}\n",
		status, 38+8*status, status)
	if headroom > 0 {
		s += fmt.Sprintf("Thermal headroom: %.2f\n", headroom)
	}
	return s
}

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func or0(a, b int) int {
	if a != 0 {
		return a
	}
	return b
}
