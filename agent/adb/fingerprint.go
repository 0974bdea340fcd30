package adb

import (
	"context"
	"fmt"
	"strings"

	"github.com/lesfarm/lesfarm/agent/device"
	"github.com/lesfarm/lesfarm/protocol"
)

// fingerprintScript prints, in @@ sections, everything Fingerprint reads:
// one adb round trip.
const fingerprintScript = `getprop; echo @@meminfo; cat /proc/meminfo; echo @@df; df -k /data; ` +
	`echo @@cpuinfo; cat /proc/cpuinfo; echo @@kernel; uname -r; echo @@cpufreq; ` +
	`for f in /sys/devices/system/cpu/cpu[0-9]*/cpufreq/cpuinfo_max_freq; do echo "$f $(cat $f)"; done`

// Identity is what a phone says about itself beyond protocol.Fingerprint:
// its build fingerprint and the conditions that flag its results.
type Identity struct {
	Serial           string
	BuildFingerprint string
	Emulator         bool
	Debuggable       bool
	SDK              int
}

// Fingerprint reads serial's fingerprint: getprop (ro.product.manufacturer
// and .model, ro.soc.manufacturer and .model, ro.build.fingerprint,
// ro.product.cpu.abi, ro.build.version.sdk and .release), /proc/meminfo,
// free space on /data, /proc/cpuinfo and the cores' cpuinfo_max_freq. The
// agent fills its own fields (builds, Go version). Garbage from getprop,
// or a phone without ro.product.model, is an error that says so.
func Fingerprint(ctx context.Context, c *Client, serial string) (*protocol.Fingerprint, *Identity, error) {
	out, err := c.Shell(ctx, serial, fingerprintScript)
	if err != nil {
		return nil, nil, err
	}
	return ParseFingerprint(serial, string(out))
}

// ParseFingerprint reads the output of the fingerprint script.
func ParseFingerprint(serial, out string) (*protocol.Fingerprint, *Identity, error) {
	sec := sections(out)
	props, err := ParseProps(sec[""])
	if err != nil {
		return nil, nil, fmt.Errorf("phone %s: %w", serial, err)
	}
	model := clean(props["ro.product.model"])
	if model == "" {
		return nil, nil, fmt.Errorf("phone %s: getprop has no ro.product.model (%d properties read)", serial, len(props))
	}
	fp := &protocol.Fingerprint{Platform: "android", DeviceModel: model, Manufacturer: clean(props["ro.product.manufacturer"])}
	switch abi := props["ro.product.cpu.abi"]; {
	case strings.HasPrefix(abi, "arm64"):
		fp.Arch = "arm64"
	case strings.HasPrefix(abi, "x86_64"):
		fp.Arch = "amd64"
	case abi != "":
		fp.Arch = clean(abi)
	}
	sdk := 0
	_, _ = fmt.Sscanf(props["ro.build.version.sdk"], "%d", &sdk)
	if rel := clean(props["ro.build.version.release"]); rel != "" || sdk > 0 {
		fp.OSVersion = strings.TrimSpace(fmt.Sprintf("Android %s (SDK %d)", rel, sdk))
	}
	soc := strings.TrimSpace(clean(props["ro.soc.manufacturer"]) + " " + clean(props["ro.soc.model"]))
	fp.SoC = cmpOr(soc, clean(props["ro.board.platform"]), clean(props["ro.hardware"]))
	mem := device.ParseMeminfo(sec["meminfo"])
	if v, ok := mem["MemTotal"]; ok && v > 0 {
		fp.RAMBytes = &v
	}
	if v, ok := mem["MemAvailable"]; ok && v >= 0 {
		fp.RAMAvailableBytes = &v
	}
	if free, err := ParseDFAvailable(sec["df"]); err == nil {
		fp.FreeStorageBytes = &free
	}
	fp.CPUModel = clean(device.ParseCPUInfo(sec["cpuinfo"]).CPU)
	fp.Kernel = clean(strings.TrimSpace(sec["kernel"]))
	fp.CoreMaxKHz = ParseCoreMax(sec["cpufreq"])
	fp.Cores = len(fp.CoreMaxKHz)
	id := &Identity{Serial: serial, BuildFingerprint: clean(props["ro.build.fingerprint"]), SDK: sdk,
		Debuggable: props["ro.debuggable"] == "1",
		Emulator: props["ro.kernel.qemu"] == "1" || props["ro.boot.qemu"] == "1" ||
			strings.Contains(props["ro.hardware"], "ranchu") || strings.Contains(props["ro.hardware"], "goldfish")}
	return fp, id, nil
}

// clean keeps a property printable and short.
func clean(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return -1
		}
		return r
	}, strings.TrimSpace(s))
	return clip(s, 120)
}

func cmpOr(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}
