package expert

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Profile describes a device's storage, so the store can emulate it: reads
// through a profile take Latency each (overlapping up to MaxInFlight reads)
// and share Bandwidth. RAMBudget, when set, caps the expert budget.
//
// Profiles are data: package profile (outside the runtime) parses and
// validates the YAML files and hands the runtime this struct, so the
// runtime needs no YAML parser (std and x/sys only).
type Profile struct {
	Name        string
	Description string
	Bandwidth   float64       // bytes per second, aggregate over reads in flight
	Latency     time.Duration // fixed cost of each read
	MaxInFlight int           // reads the device serves concurrently
	RAMBudget   int64         // bytes of RAM for the whole process; 0 = unset
	// Compute is the device's decode speed, for device time (devicetime.go);
	// nil when the profile declares none.
	Compute *Compute
	// PageSize and ReadAhead shape the naive mode's mmap-like reads
	// (naive.go); zero means DefaultPageSize and no read-ahead.
	PageSize  int64
	ReadAhead int64
	// Service, when set, is the device's measured read service times
	// (servicetime.go), which then price every read instead of Latency
	// and Bandwidth (kept as the summary figures).
	Service *ServiceTimes
}

// ParseSize parses a byte size such as "4096", "512MiB", "1.5GB" or "2G"
// (K/M/G/T are powers of 1000 with B, 1024 with iB or alone).
func ParseSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, errors.New("empty size")
	}
	i := len(s)
	for i > 0 && (s[i-1] < '0' || s[i-1] > '9') && s[i-1] != '.' {
		i--
	}
	num, unit := s[:i], strings.ToLower(strings.TrimSpace(s[i:]))
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
		return 0, fmt.Errorf("size %q is not a number with an optional unit (e.g. 512MiB)", s)
	}
	mult := map[string]float64{
		"": 1, "b": 1,
		"k": 1 << 10, "kib": 1 << 10, "kb": 1e3,
		"m": 1 << 20, "mib": 1 << 20, "mb": 1e6,
		"g": 1 << 30, "gib": 1 << 30, "gb": 1e9,
		"t": 1 << 40, "tib": 1 << 40, "tb": 1e12,
	}[unit]
	if mult == 0 {
		return 0, fmt.Errorf("size %q has an unknown unit %q (use B, KiB, MiB, GiB, KB, MB, GB)", s, unit)
	}
	f := v * mult
	if f > math.MaxInt64/2 {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return int64(f), nil
}

// ParseRate parses a bandwidth such as "3.5GB/s" or "800MiB/s" into bytes
// per second.
func ParseRate(s string) (float64, error) {
	t := strings.TrimSpace(s)
	if !strings.HasSuffix(strings.ToLower(t), "/s") {
		return 0, fmt.Errorf("rate %q must end in /s (e.g. 3.5GB/s)", s)
	}
	n, err := ParseSize(t[:len(t)-2])
	if err != nil {
		return 0, err
	}
	if n < 1<<20 {
		return 0, fmt.Errorf("rate %q is below 1 MiB/s", s)
	}
	return float64(n), nil
}
