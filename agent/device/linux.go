package device

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/lesfarm/lesfarm/protocol"
)

// readFile reads a small pseudo-file under root and trims whitespace and NUL
// bytes (device-tree strings are NUL-terminated). It returns "" when the file
// is missing or unreadable.
func readFile(root, path string) string {
	b, err := os.ReadFile(filepath.Join(rootOr(root), path))
	if err != nil || len(b) > 1<<20 {
		return ""
	}
	return strings.TrimSpace(strings.Trim(string(b), "\x00"))
}

func rootOr(root string) string {
	if root == "" {
		return "/"
	}
	return root
}

func readLinux(fp *protocol.Fingerprint, opt Options) {
	root := opt.Root
	fp.Kernel = readFile(root, "proc/sys/kernel/osrelease")
	info := ParseCPUInfo(readFile(root, "proc/cpuinfo"))
	fp.CPUModel = info.CPU
	mem := ParseMeminfo(readFile(root, "proc/meminfo"))
	if v, ok := mem["MemTotal"]; ok {
		fp.RAMBytes = ptr(v)
	}
	if v, ok := mem["MemAvailable"]; ok {
		fp.RAMAvailableBytes = ptr(v)
	}
	fp.CoreMaxKHz = coreMaxKHz(root)

	props := androidProps(opt)
	if len(props) > 0 && (opt.Goos == "android" || props["ro.build.version.release"] != "") {
		fp.Platform = "android"
		if rel := props["ro.build.version.release"]; rel != "" {
			fp.OSVersion = "Android " + rel
			if sdk := props["ro.build.version.sdk"]; sdk != "" {
				fp.OSVersion += " (SDK " + sdk + ")"
			}
		}
		fp.Manufacturer = first(props["ro.product.manufacturer"], props["ro.product.vendor.manufacturer"], props["ro.product.system.manufacturer"])
		fp.DeviceModel = first(props["ro.product.model"], props["ro.product.vendor.model"], props["ro.product.system.model"])
		soc := strings.TrimSpace(props["ro.soc.manufacturer"] + " " + props["ro.soc.model"])
		fp.SoC = first(soc, props["ro.board.platform"], props["ro.hardware"], info.Hardware)
	} else {
		fp.OSVersion = ParseOSRelease(readFile(root, "etc/os-release"))
		dtModel := readFile(root, "sys/firmware/devicetree/base/model")
		product := readFile(root, "sys/class/dmi/id/product_name")
		fp.Manufacturer = readFile(root, "sys/class/dmi/id/sys_vendor")
		fp.DeviceModel = first(dtModel, product)
		fp.SoC = first(readFile(root, "sys/devices/soc0/machine"), info.Hardware)
	}
	if fp.CPUModel == "" && fp.SoC != "" {
		fp.CPUModel = fp.SoC
	}
}

func first(vals ...string) string {
	for _, v := range vals {
		if v = strings.TrimSpace(v); v != "" {
			return v
		}
	}
	return ""
}

// androidProps returns Android system properties: from getprop when running
// on a real Android device, else from the build.prop files under root.
func androidProps(opt Options) map[string]string {
	props := map[string]string{}
	if opt.Root == "" && (opt.Goos == "android" || opt.Goos == "") {
		if path, err := exec.LookPath("/system/bin/getprop"); err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			if out, err := exec.CommandContext(ctx, path).Output(); err == nil {
				props = ParseGetprop(string(out))
			}
		}
	}
	if len(props) == 0 {
		for _, f := range []string{"system/build.prop", "vendor/build.prop", "system/vendor/build.prop"} {
			for k, v := range ParseBuildProp(readFile(opt.Root, f)) {
				if _, ok := props[k]; !ok {
					props[k] = v
				}
			}
		}
	}
	return props
}

// ParseBuildProp parses an Android build.prop file: key=value lines, '#'
// comments. Malformed lines are skipped.
func ParseBuildProp(s string) map[string]string {
	out := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || strings.TrimSpace(k) == "" {
			continue
		}
		out[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return out
}

// ParseGetprop parses the output of Android's getprop: "[key]: [value]" lines.
func ParseGetprop(s string) map[string]string {
	out := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "[") {
			continue
		}
		k, rest, ok := strings.Cut(line[1:], "]: [")
		if !ok || !strings.HasSuffix(rest, "]") {
			continue
		}
		out[k] = rest[:len(rest)-1]
	}
	return out
}

// ParseOSRelease returns PRETTY_NAME (else NAME VERSION_ID) of an
// os-release file.
func ParseOSRelease(s string) string {
	kv := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), "=")
		if !ok {
			continue
		}
		if uq, err := strconv.Unquote(v); err == nil {
			v = uq
		} else {
			v = strings.Trim(v, `"'`)
		}
		kv[k] = v
	}
	if p := kv["PRETTY_NAME"]; p != "" {
		return p
	}
	return strings.TrimSpace(kv["NAME"] + " " + kv["VERSION_ID"])
}

// ParseMeminfo parses /proc/meminfo into bytes per key ("MemTotal": ...).
// Lines without a number are skipped.
func ParseMeminfo(s string) map[string]int64 {
	out := map[string]int64{}
	for _, line := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil || n < 0 {
			continue
		}
		if len(f) > 1 && strings.EqualFold(f[1], "kB") {
			if n > (1<<62)/1024 {
				continue
			}
			n *= 1024
		}
		out[strings.TrimSpace(k)] = n
	}
	return out
}

// CPUInfo is what ParseCPUInfo extracts from /proc/cpuinfo.
type CPUInfo struct {
	CPU      string // model name, or the ARM core names
	Hardware string // "Hardware" line (older Android kernels name the SoC there)
}

// armParts maps ARM Ltd (implementer 0x41) part numbers to core names.
var armParts = map[string]string{
	"0xd03": "Cortex-A53", "0xd04": "Cortex-A35", "0xd05": "Cortex-A55", "0xd07": "Cortex-A57",
	"0xd08": "Cortex-A72", "0xd09": "Cortex-A73", "0xd0a": "Cortex-A75", "0xd0b": "Cortex-A76",
	"0xd0d": "Cortex-A77", "0xd41": "Cortex-A78", "0xd44": "Cortex-X1", "0xd46": "Cortex-A510",
	"0xd47": "Cortex-A710", "0xd48": "Cortex-X2", "0xd4d": "Cortex-A715", "0xd4e": "Cortex-X3",
	"0xd80": "Cortex-A520", "0xd81": "Cortex-A720", "0xd82": "Cortex-X4", "0xd85": "Cortex-X925",
	"0xd87": "Cortex-A725", "0xd0c": "Neoverse-N1", "0xd40": "Neoverse-V1", "0xd49": "Neoverse-N2",
	"0xd4f": "Neoverse-V2",
}

// ParseCPUInfo extracts the CPU model from /proc/cpuinfo. On x86 it is the
// "model name"; on ARM, where the kernel prints only part numbers, the
// distinct core names in order of first appearance, e.g.
// "ARM Cortex-X3 + Cortex-A715 + Cortex-A510".
func ParseCPUInfo(s string) CPUInfo {
	var info CPUInfo
	var parts []string
	seen := map[string]bool{}
	implementer := ""
	for _, line := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch k {
		case "model name", "Processor", "cpu model":
			if info.CPU == "" {
				info.CPU = v
			}
		case "Hardware":
			info.Hardware = v
		case "CPU implementer":
			implementer = strings.ToLower(v)
		case "CPU part":
			p := strings.ToLower(v)
			name := p
			if implementer == "0x41" {
				if n, ok := armParts[p]; ok {
					name = n
				}
			} else if implementer != "" {
				name = implementer + ":" + p
			}
			if !seen[name] {
				seen[name] = true
				parts = append(parts, name)
			}
		}
	}
	if info.CPU == "" && len(parts) > 0 {
		prefix := ""
		if implementer == "0x41" {
			prefix = "ARM "
		}
		info.CPU = prefix + strings.Join(parts, " + ")
	}
	return info
}

func coreMaxKHz(root string) []int64 {
	dirs, _ := filepath.Glob(filepath.Join(rootOr(root), "sys/devices/system/cpu/cpu[0-9]*"))
	type core struct {
		n   int
		khz int64
	}
	var cores []core
	for _, d := range dirs {
		n, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(d), "cpu"))
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(d, "cpufreq/cpuinfo_max_freq"))
		if err != nil {
			continue
		}
		khz, err := strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64)
		if err != nil || khz <= 0 {
			continue
		}
		cores = append(cores, core{n, khz})
	}
	if len(cores) == 0 {
		return nil
	}
	sort.Slice(cores, func(i, j int) bool { return cores[i].n < cores[j].n })
	out := make([]int64, len(cores))
	for i, c := range cores {
		out[i] = c.khz
	}
	return out
}

// ParseTemp converts a thermal sysfs reading to degrees Celsius. Kernels
// report millidegrees; a few drivers report degrees or decidegrees. Values
// outside -40..200 °C after conversion are rejected (disabled sensors report
// things like -273000).
func ParseTemp(s string) (float64, bool) {
	v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil {
		return 0, false
	}
	switch {
	case v > 1000 || v < -1000:
		v /= 1000
	case v > 200:
		v /= 10
	}
	if v < -40 || v > 200 {
		return 0, false
	}
	return v, true
}

func readLinuxState(st *protocol.DeviceState, root string) {
	zones, _ := filepath.Glob(filepath.Join(rootOr(root), "sys/class/thermal/thermal_zone[0-9]*"))
	sort.Slice(zones, func(i, j int) bool { return zoneNum(zones[i]) < zoneNum(zones[j]) })
	for _, z := range zones {
		b, err := os.ReadFile(filepath.Join(z, "temp"))
		if err != nil {
			continue
		}
		t, ok := ParseTemp(string(b))
		if !ok {
			continue
		}
		name := strings.TrimSpace(readAbs(filepath.Join(z, "type")))
		if name == "" {
			name = filepath.Base(z)
		}
		st.Thermal = append(st.Thermal, protocol.ThermalZone{Name: name, TempC: t})
		if st.MaxTempC == nil || t > *st.MaxTempC {
			st.MaxTempC = ptr(t)
		}
	}

	supplies, _ := filepath.Glob(filepath.Join(rootOr(root), "sys/class/power_supply/*"))
	sort.Strings(supplies)
	pluggedIn := false
	for _, s := range supplies {
		typ := strings.TrimSpace(readAbs(filepath.Join(s, "type")))
		switch typ {
		case "Mains", "USB", "Wireless", "USB_PD", "USB_C":
			if strings.TrimSpace(readAbs(filepath.Join(s, "online"))) == "1" {
				pluggedIn = true
			}
		}
	}
	for _, s := range supplies {
		if strings.TrimSpace(readAbs(filepath.Join(s, "type"))) != "Battery" {
			continue
		}
		if c, err := strconv.ParseFloat(strings.TrimSpace(readAbs(filepath.Join(s, "capacity"))), 64); err == nil && c >= 0 && c <= 100 {
			st.BatteryPercent = ptr(c)
		}
		status := strings.TrimSpace(readAbs(filepath.Join(s, "status")))
		st.BatteryStatus = status
		switch status {
		case "Charging":
			st.Charging = ptr(true)
		case "Discharging", "Not charging":
			st.Charging = ptr(false)
		case "Full":
			st.Charging = ptr(false)
		}
		if t := strings.TrimSpace(readAbs(filepath.Join(s, "temp"))); t != "" {
			// power_supply temp is in tenths of a degree Celsius.
			if v, err := strconv.ParseFloat(t, 64); err == nil && v/10 > -40 && v/10 < 200 {
				st.BatteryTempC = ptr(v / 10)
			}
		}
		break
	}
	if st.Charging == nil && pluggedIn && st.BatteryStatus != "" {
		st.Charging = ptr(true)
	}
}

func zoneNum(p string) int {
	n, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(p), "thermal_zone"))
	if err != nil {
		return 1 << 30
	}
	return n
}

func readAbs(p string) string {
	b, err := os.ReadFile(p)
	if err != nil || len(b) > 1<<16 {
		return ""
	}
	return string(b)
}
