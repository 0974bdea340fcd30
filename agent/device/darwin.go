//go:build darwin || ios

package device

import (
	"strings"

	"golang.org/x/sys/unix"

	"github.com/lesfarm/lesfarm/protocol"
)

func readDarwin(fp *protocol.Fingerprint, opt Options) {
	fp.Kernel, _ = unix.Sysctl("kern.osrelease")
	ver, _ := unix.Sysctl("kern.osproductversion")
	name := "macOS"
	if fp.Platform == "ios" {
		name = "iOS"
	}
	if ver != "" {
		fp.OSVersion = name + " " + ver
	}
	fp.Manufacturer = "Apple"
	// hw.machine is the model identifier on iOS ("iPhone16,1"); on macOS
	// hw.model is ("Mac14,2") and hw.machine is the architecture.
	if fp.Platform == "ios" {
		fp.DeviceModel, _ = unix.Sysctl("hw.machine")
	} else {
		fp.DeviceModel, _ = unix.Sysctl("hw.model")
	}
	fp.CPUModel, _ = unix.Sysctl("machdep.cpu.brand_string")
	fp.CPUModel = strings.TrimSpace(fp.CPUModel)
	fp.SoC = fp.CPUModel
	if v, err := unix.SysctlUint64("hw.memsize"); err == nil && v > 0 {
		fp.RAMBytes = ptr(int64(v))
	}
}
