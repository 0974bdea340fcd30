package protocol

import (
	"fmt"
	"math"
	"time"
)

// Clock states of a phone while a config ran (PhoneState.Clocks).
const (
	// ClocksLocked: rooted phone, userspace governor, every core of the
	// chosen cluster at one fixed frequency, thermal and perf daemons
	// paused (AndroidX lockClocks.sh).
	ClocksLocked = "locked"
	// ClocksFixedPerformance: `cmd power set-fixed-performance-mode-enabled
	// true` (Android 11+, no root): the OEM's sustainable clocks.
	ClocksFixedPerformance = "fixed-performance"
	// ClocksFree: the governors do what they like.
	ClocksFree = "free"
)

// PinNone is PhoneState.Pin of a runner free to run on every CPU.
const PinNone = "none"

// How the model was evicted from a phone's page cache before a config
// (PhoneState.Eviction), so that its flash reads are real reads.
const (
	// EvictionFadvise: the runner dropped the model file's cached pages
	// with posix_fadvise(POSIX_FADV_DONTNEED) (no root needed).
	EvictionFadvise = "fadvise"
	// EvictionDropCaches: the agent dropped the whole page cache as root
	// (echo 3 > /proc/sys/vm/drop_caches).
	EvictionDropCaches = "drop_caches"
	// EvictionNone: the model's pages were left cached (--adb-evict none,
	// or a build whose runner does not evict).
	EvictionNone = "none"
)

// Flags of a PhoneState: conditions that make a measurement suspect.
const (
	PhoneFlagEmulator    = "emulator"    // ro.kernel.qemu or an emulator board
	PhoneFlagDebuggable  = "debuggable"  // ro.debuggable=1
	PhoneFlagFreeClocks  = "free_clocks" // Clocks is free
	PhoneFlagThrottled   = "throttled"   // still throttled after the re-runs
	PhoneFlagCooledDown  = "cooled_down" // the thermal gate waited before the config
	PhoneFlagHotAtFinish = "hot_at_end"  // thermal status at the end ≥ moderate
)

// Bounds of a PhoneState, checked by Validate.
const (
	MaxPhoneClusters    = 16
	MaxPhoneCPUs        = 64
	MaxTimeInStateFreqs = 128
	MaxPhoneFlags       = 16
	MaxPhoneZones       = 64
)

// PhoneState is the state of a real phone around one config (the host
// agent's --adb mode, agent/adb): its identity as the result needs it,
// the clock state and gates, and a snapshot at the start and end of the
// config. It travels as ConfigResult.PhoneState, optional: results from
// other devices and from older agents have none, and older coordinators
// keep it inside the stored result JSON without reading it.
type PhoneState struct {
	// Serial is the adb serial of the phone.
	Serial string `json:"serial,omitempty"`
	// BuildFingerprint is ro.build.fingerprint.
	BuildFingerprint string `json:"build_fingerprint,omitempty"`
	// Clocks is ClocksLocked, ClocksFixedPerformance or ClocksFree.
	Clocks string `json:"clocks"`
	// LockedKHz is the frequency the locked cluster ran at (Clocks locked).
	LockedKHz int64 `json:"locked_khz,omitempty"`
	// Flags are PhoneFlag* values.
	Flags []string `json:"flags,omitempty"`
	// Pin is the CPU cluster the config's runner was pinned to with
	// taskset (agent --adb-pin: little, big, prime or a cluster index),
	// PinNone when it was not pinned; PinnedCPUs are that cluster's CPUs.
	// Results of older agents have neither.
	Pin        string `json:"pin,omitempty"`
	PinnedCPUs []int  `json:"pinned_cpus,omitempty"`
	// Eviction is how the model left the phone's page cache before the
	// config: EvictionFadvise, EvictionDropCaches or EvictionNone. Results
	// of older agents and refused configs have none.
	Eviction string `json:"eviction,omitempty"`
	// CooldownMS is how long the thermal gate waited before the config
	// (and before its re-runs).
	CooldownMS int64 `json:"cooldown_ms,omitempty"`
	// RefBaselineNS is the reference microbenchmark's time on this phone
	// when the agent attached it (the fastest of its first runs); RefBeforeNS
	// and RefAfterNS are its times right before and after the config. The
	// phone is throttled when RefAfterNS > 1.10 × RefBaselineNS.
	RefBaselineNS int64 `json:"ref_baseline_ns,omitempty"`
	RefBeforeNS   int64 `json:"ref_before_ns,omitempty"`
	RefAfterNS    int64 `json:"ref_after_ns,omitempty"`
	// Reruns is how many times the config was re-run because the phone was
	// throttled after it.
	Reruns int `json:"reruns,omitempty"`
	// Start and End are the phone's state right before and after the
	// config's measured run.
	Start *PhoneSnapshot `json:"start,omitempty"`
	End   *PhoneSnapshot `json:"end,omitempty"`
}

// PhoneSnapshot is a phone's state at one moment. Unreadable values are
// absent, never zero.
type PhoneSnapshot struct {
	ReadAt time.Time `json:"read_at,omitzero"`
	// BatteryPercent, BatteryTempC and Charging come from `dumpsys battery`
	// (level/scale, temperature in tenths of °C, status 2 = charging or
	// any powered source).
	BatteryPercent *float64 `json:"battery_percent,omitempty"`
	BatteryTempC   *float64 `json:"battery_temp_c,omitempty"`
	Charging       *bool    `json:"charging,omitempty"`
	// ThermalStatus is `dumpsys thermalservice`'s "Thermal Status" (0 none,
	// 1 light, 2 moderate, 3 severe, 4 critical, 5 emergency, 6 shutdown);
	// ThermalHeadroom its headroom forecast where printed (1.0 = throttling).
	ThermalStatus   *int     `json:"thermal_status,omitempty"`
	ThermalHeadroom *float64 `json:"thermal_headroom,omitempty"`
	// MaxTempC is the hottest zone of /sys/class/thermal.
	MaxTempC *float64 `json:"max_temp_c,omitempty"`
	// Clusters are the cpufreq policies.
	Clusters []CPUCluster `json:"clusters,omitempty"`
}

// CPUCluster is one cpufreq policy: its CPUs, governor, frequencies in kHz
// and cpufreq/stats/time_in_state (time at each frequency, in 10 ms units,
// since boot).
type CPUCluster struct {
	CPUs        []int       `json:"cpus"`
	Governor    string      `json:"governor,omitempty"`
	CurKHz      int64       `json:"cur_khz,omitempty"`
	MaxKHz      int64       `json:"max_khz,omitempty"`
	TimeInState []FreqTicks `json:"time_in_state,omitempty"`
}

// FreqTicks is one time_in_state row: a frequency in kHz and the time
// spent there in 10 ms units.
type FreqTicks struct {
	KHz   int64 `json:"khz"`
	Ticks int64 `json:"ticks"`
}

// Validate checks p's bounds: a known clock state, bounded lists and
// strings, battery in [0, 100], finite temperatures, no negative time.
func (p *PhoneState) Validate() error {
	switch p.Clocks {
	case ClocksLocked, ClocksFixedPerformance, ClocksFree:
	default:
		return fmt.Errorf("phone_state: clocks %q unknown (want locked, fixed-performance or free)", clip(p.Clocks))
	}
	if len(p.Serial) > 128 || len(p.BuildFingerprint) > 256 {
		return fmt.Errorf("phone_state: serial or build fingerprint too long")
	}
	if len(p.Pin) > 16 || len(p.PinnedCPUs) > MaxPhoneCPUs {
		return fmt.Errorf("phone_state: pin %q or its %d CPUs too long", clip(p.Pin), len(p.PinnedCPUs))
	}
	for _, c := range p.PinnedCPUs {
		if c < 0 || c >= 4096 {
			return fmt.Errorf("phone_state: pinned cpu %d out of range", c)
		}
	}
	switch p.Eviction {
	case "", EvictionFadvise, EvictionDropCaches, EvictionNone:
	default:
		return fmt.Errorf("phone_state: eviction %q unknown (want fadvise, drop_caches or none)", clip(p.Eviction))
	}
	if len(p.Flags) > MaxPhoneFlags {
		return fmt.Errorf("phone_state: %d flags (max %d)", len(p.Flags), MaxPhoneFlags)
	}
	for _, f := range p.Flags {
		if f == "" || len(f) > 32 {
			return fmt.Errorf("phone_state: flag %q invalid", clip(f))
		}
	}
	if p.CooldownMS < 0 || p.RefBaselineNS < 0 || p.RefBeforeNS < 0 || p.RefAfterNS < 0 || p.Reruns < 0 || p.LockedKHz < 0 {
		return fmt.Errorf("phone_state: negative time or count")
	}
	for name, s := range map[string]*PhoneSnapshot{"start": p.Start, "end": p.End} {
		if s == nil {
			continue
		}
		if err := s.validate(); err != nil {
			return fmt.Errorf("phone_state.%s: %w", name, err)
		}
	}
	return nil
}

func (s *PhoneSnapshot) validate() error {
	if b := s.BatteryPercent; b != nil && !(*b >= 0 && *b <= 100) {
		return fmt.Errorf("battery_percent %v outside [0, 100]", *b)
	}
	for name, v := range map[string]*float64{"battery_temp_c": s.BatteryTempC, "max_temp_c": s.MaxTempC, "thermal_headroom": s.ThermalHeadroom} {
		if v != nil && (math.IsNaN(*v) || *v < -100 || *v > 1000) {
			return fmt.Errorf("%s %v out of range", name, *v)
		}
	}
	if t := s.ThermalStatus; t != nil && (*t < 0 || *t > 6) {
		return fmt.Errorf("thermal_status %d outside [0, 6]", *t)
	}
	if len(s.Clusters) > MaxPhoneClusters {
		return fmt.Errorf("%d clusters (max %d)", len(s.Clusters), MaxPhoneClusters)
	}
	for i, c := range s.Clusters {
		if len(c.CPUs) > MaxPhoneCPUs || len(c.TimeInState) > MaxTimeInStateFreqs || len(c.Governor) > 64 {
			return fmt.Errorf("clusters[%d]: too many cpus or frequencies, or a governor name too long", i)
		}
		if c.CurKHz < 0 || c.MaxKHz < 0 {
			return fmt.Errorf("clusters[%d]: negative frequency", i)
		}
		for _, cpu := range c.CPUs {
			if cpu < 0 || cpu >= 4096 {
				return fmt.Errorf("clusters[%d]: cpu %d out of range", i, cpu)
			}
		}
		for _, f := range c.TimeInState {
			if f.KHz < 0 || f.Ticks < 0 {
				return fmt.Errorf("clusters[%d]: negative time_in_state", i)
			}
		}
	}
	return nil
}
