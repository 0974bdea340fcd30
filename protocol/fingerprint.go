package protocol

import (
	"fmt"
	"time"
)

// Fingerprint identifies a device and its current condition; it is the one
// type for it on both sides (agent/device fills it, the coordinator stores
// it). The identity fields (everything but State, FreeStorageBytes and
// RAMAvailableBytes) are stable across reboots of the same device and
// build, so the coordinator can key result series on them. Optional fields
// that could not be read stay nil or empty (absent from JSON), never a
// made-up zero, so "0 %" differs from "unknown".
type Fingerprint struct {
	// Platform is "android", "linux", "ios" or "darwin".
	Platform string `json:"platform"`
	// Arch is the Go architecture the agent was built for, e.g. "arm64".
	Arch string `json:"arch,omitempty"`
	// OSVersion is the OS release, e.g. "Android 14 (SDK 34)", "Debian GNU/Linux 12 (bookworm)", "iOS 17.4".
	OSVersion string `json:"os_version,omitempty"`
	// Kernel is the kernel release (uname -r or kern.osrelease).
	Kernel string `json:"kernel,omitempty"`
	// DeviceModel is the device model used in result series, e.g.
	// "Pixel 8 Pro". For an emulated device it is "emulated:<profile>" so
	// emulated results never mix with a real device's series.
	DeviceModel string `json:"model,omitempty"`
	// Manufacturer is the device maker, e.g. "Google", "Apple".
	Manufacturer string `json:"manufacturer,omitempty"`
	// SoC names the system on chip, e.g. "Tensor G3" or "qcom sm8650".
	SoC string `json:"soc,omitempty"`
	// CPUModel is the CPU model string, e.g. "AMD EPYC" or "ARM Cortex-X3".
	CPUModel string `json:"cpu,omitempty"`
	// CoreMaxKHz is the maximum frequency of each core, in kHz, when exposed
	// by cpufreq; on big.LITTLE phones it reveals the cluster layout.
	CoreMaxKHz []int64 `json:"core_max_khz,omitempty"`
	// Cores is the number of logical CPUs usable by the agent.
	Cores int `json:"cores,omitempty"`
	// RAMBytes is the total memory the OS reports (an emulated device's
	// budget).
	RAMBytes *int64 `json:"ram_bytes,omitempty"`
	// RAMAvailableBytes is the memory available for new work right now.
	RAMAvailableBytes *int64 `json:"ram_available_bytes,omitempty"`
	// FreeStorageBytes is the free space of the agent's cache filesystem.
	FreeStorageBytes *int64 `json:"free_storage_bytes,omitempty"`
	// AgentBuild and RuntimeBuild identify the code: module version and VCS
	// revision (the runtime is embedded, so they share a revision).
	AgentBuild   string `json:"agent_build,omitempty"`
	RuntimeBuild string `json:"runtime_build,omitempty"`
	GoVersion    string `json:"go_version,omitempty"`
	// ExecPlatform is GOOS/GOARCH of the build executables the agent can
	// run as a child process ("linux/amd64"); empty when it cannot exec
	// downloaded code (a gomobile app) and runs its embedded build only.
	ExecPlatform string `json:"exec_platform,omitempty"`
	// EmbeddedBuild is the build id of the agent's embedded runtime
	// (EmbeddedBuildID) and EmbeddedSHA256 its executable's sha256; the
	// coordinator registers it as a build on hello.
	EmbeddedBuild  string `json:"embedded_build,omitempty"`
	EmbeddedSHA256 string `json:"embedded_sha256,omitempty"`
	// Emulated is true for an agent that emulates a device's storage with a
	// profile; its results never mix with real devices' series.
	Emulated bool `json:"emulated,omitempty"`
	// Profile is the storage profile name of an emulated device.
	Profile string `json:"profile,omitempty"`
	// HostModel keeps the real model of the machine that emulates a device.
	HostModel string `json:"host_model,omitempty"`
	// State is the thermal and battery state when the message was sent.
	State *DeviceState `json:"state,omitempty"`
}

// String returns a one-line summary for logs.
func (f *Fingerprint) String() string {
	ram := "?"
	if f.RAMBytes != nil {
		ram = fmt.Sprintf("%.1fGiB", float64(*f.RAMBytes)/(1<<30))
	}
	return fmt.Sprintf("%s/%s %q %s cpu=%q cores=%d ram=%s", f.Platform, f.Arch, f.DeviceModel, f.OSVersion, f.CPUModel, f.Cores, ram)
}

// DeviceState is the changing part of a device's condition.
type DeviceState struct {
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
	// BatteryTempC is the battery temperature, when exposed.
	BatteryTempC *float64 `json:"battery_temp_c,omitempty"`
	// BatteryStatus is the raw status, e.g. "Charging", "Discharging", "Full".
	BatteryStatus string `json:"battery_status,omitempty"`
	// ReadAt is when the state was read.
	ReadAt time.Time `json:"read_at,omitzero"`
}

// ThermalZone is one temperature sensor.
type ThermalZone struct {
	Name  string  `json:"name"`
	TempC float64 `json:"temp_c"`
}
