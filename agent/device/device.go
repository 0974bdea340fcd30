// Package device reads the fingerprint of the machine an agent runs on:
// platform, OS, device model, SoC/CPU, cores, RAM, free storage and build,
// plus thermal and battery state where the platform lets an unprivileged
// process read them.
//
// Linux and Android are read from /proc and /sys (and Android's build
// properties); darwin and iOS from sysctl. A field that cannot be read is
// absent (nil or empty, omitted from JSON), never a made-up zero, so the
// coordinator can tell "0 %" from "unknown".
package device

import (
	"encoding/json"
	"runtime"
	"runtime/debug"
	"time"
)

// Fingerprint identifies a device and its current condition. The identity
// fields (everything but State, FreeStorageBytes and RAMAvailableBytes) are
// stable across reboots of the same device and build, so the coordinator can
// key result series on them. Pointer and omitempty fields are absent when they
// could not be read.
type Fingerprint struct {
	// Platform is "android", "linux", "ios" or "darwin".
	Platform string `json:"platform"`
	// Arch is the Go architecture the agent was built for, e.g. "arm64".
	Arch string `json:"arch"`
	// OSVersion is the OS release, e.g. "Android 14 (SDK 34)", "Debian GNU/Linux 12 (bookworm)", "iOS 17.4".
	OSVersion string `json:"os_version,omitempty"`
	// Kernel is the kernel release (uname -r or kern.osrelease).
	Kernel string `json:"kernel,omitempty"`
	// Manufacturer is the device maker, e.g. "Google", "Apple".
	Manufacturer string `json:"manufacturer,omitempty"`
	// Model is the device model used in result series, e.g. "Pixel 8 Pro".
	// For an emulated device it is "emulated:<profile>" so emulated results
	// never mix with a real device's series.
	Model string `json:"model,omitempty"`
	// SoC names the system on chip, e.g. "Tensor G3" or "qcom sm8650".
	SoC string `json:"soc,omitempty"`
	// CPU is the CPU model string, e.g. "AMD EPYC" or "ARM Cortex-X3".
	CPU string `json:"cpu,omitempty"`
	// Cores is the number of logical CPUs usable by the agent.
	Cores int `json:"cores"`
	// CoreMaxKHz is the maximum frequency of each core, in kHz, when exposed
	// by cpufreq; on big.LITTLE phones it reveals the cluster layout.
	CoreMaxKHz []int64 `json:"core_max_khz,omitempty"`
	// RAMBytes is the total memory the OS reports.
	RAMBytes *int64 `json:"ram_bytes,omitempty"`
	// RAMAvailableBytes is the memory available for new work right now.
	RAMAvailableBytes *int64 `json:"ram_available_bytes,omitempty"`
	// FreeStorageBytes is the free space of the agent's cache filesystem.
	FreeStorageBytes *int64 `json:"free_storage_bytes,omitempty"`
	// AgentBuild and RuntimeBuild identify the code: module version and VCS
	// revision (the runtime is embedded, so they share a revision).
	AgentBuild   string `json:"agent_build"`
	RuntimeBuild string `json:"runtime_build"`
	GoVersion    string `json:"go_version"`
	// Emulated is true when the agent emulates a device with a storage
	// profile instead of measuring its own hardware.
	Emulated bool `json:"emulated,omitempty"`
	// Profile is the storage profile name of an emulated device.
	Profile string `json:"profile,omitempty"`
	// HostModel keeps the real model of the machine that emulates a device.
	HostModel string `json:"host_model,omitempty"`
	// State is the device's current thermal and battery condition.
	State State `json:"state"`
}

// State is the part of a fingerprint that changes while the device runs.
type State struct {
	// Thermal lists the readable thermal zones.
	Thermal []ThermalZone `json:"thermal,omitempty"`
	// MaxTempC is the hottest readable zone, in degrees Celsius.
	MaxTempC *float64 `json:"max_temp_c,omitempty"`
	// ThermalStatus is a platform thermal status when one is exposed
	// (e.g. iOS "nominal"/"fair"/"serious"/"critical", set by the host app).
	ThermalStatus string `json:"thermal_status,omitempty"`
	// BatteryPercent is the battery charge, 0–100.
	BatteryPercent *float64 `json:"battery_percent,omitempty"`
	// Charging is true while external power charges the battery.
	Charging *bool `json:"charging,omitempty"`
	// BatteryStatus is the raw status, e.g. "Charging", "Discharging", "Full".
	BatteryStatus string `json:"battery_status,omitempty"`
	// BatteryTempC is the battery temperature, when exposed.
	BatteryTempC *float64 `json:"battery_temp_c,omitempty"`
	// ReadAt is when the state was read.
	ReadAt time.Time `json:"read_at"`
}

// ThermalZone is one temperature sensor.
type ThermalZone struct {
	Name  string  `json:"name"`
	TempC float64 `json:"temp_c"`
}

// Options tune Read. The zero value reads the real system.
type Options struct {
	// Root prefixes every /proc, /sys and /system path; tests point it at a
	// fake tree. Empty means "/".
	Root string
	// StoragePath is the directory whose filesystem's free space is
	// reported; empty means the current directory.
	StoragePath string
	// Profile, when set, marks the fingerprint as an emulated device with
	// this storage profile name.
	Profile string
	// RAMBytes, when > 0, overrides the RAM reported (an emulated device's
	// memory budget).
	RAMBytes int64
	// Goos overrides runtime.GOOS (tests of another platform's reader).
	Goos string
}

// Read returns the fingerprint of this device. It never fails: what cannot
// be read is left absent.
func Read(opt Options) *Fingerprint {
	goos := opt.Goos
	if goos == "" {
		goos = runtime.GOOS
	}
	fp := &Fingerprint{
		Platform:  goos,
		Arch:      runtime.GOARCH,
		Cores:     runtime.NumCPU(),
		GoVersion: runtime.Version(),
	}
	fp.AgentBuild = Build()
	fp.RuntimeBuild = fp.AgentBuild
	switch goos {
	case "linux", "android":
		readLinux(fp, opt)
	case "darwin", "ios":
		readDarwin(fp, opt)
	}
	if v, ok := freeStorage(opt.StoragePath); ok {
		fp.FreeStorageBytes = &v
	}
	fp.State = ReadState(opt)
	if opt.RAMBytes > 0 {
		v := opt.RAMBytes
		fp.RAMBytes = &v
		if fp.RAMAvailableBytes != nil && *fp.RAMAvailableBytes > v {
			fp.RAMAvailableBytes = &v
		}
	}
	if opt.Profile != "" {
		fp.Emulated = true
		fp.Profile = opt.Profile
		fp.HostModel = fp.Model
		if fp.HostModel == "" {
			fp.HostModel = fp.CPU
		}
		fp.Model = "emulated:" + opt.Profile
	}
	return fp
}

// ReadState returns the current thermal and battery state.
func ReadState(opt Options) State {
	goos := opt.Goos
	if goos == "" {
		goos = runtime.GOOS
	}
	st := State{ReadAt: time.Now().UTC()}
	switch goos {
	case "linux", "android":
		readLinuxState(&st, opt.Root)
	}
	return st
}

// JSON returns the fingerprint as JSON.
func (fp *Fingerprint) JSON() []byte {
	b, _ := json.Marshal(fp)
	return b
}

// Build returns the module version and VCS revision of this binary, e.g.
// "v0.0.0 rev 1a2b3c4d5e6f+dirty". It returns "devel" when the toolchain
// recorded nothing.
func Build() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	v := info.Main.Version
	if v == "" {
		v = "(devel)"
	}
	for _, s := range info.Settings {
		if s.Key == "vcs.revision" && s.Value != "" {
			rev := s.Value
			if len(rev) > 12 {
				rev = rev[:12]
			}
			v += " rev " + rev
		}
	}
	for _, s := range info.Settings {
		if s.Key == "vcs.modified" && s.Value == "true" {
			v += "+dirty"
		}
	}
	return v
}

func ptr[T any](v T) *T { return &v }
