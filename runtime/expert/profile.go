package expert

import (
	"fmt"
	"strings"
	"time"

	"github.com/lesfarm/lesfarm/runtime/units"
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

// ParseRate parses a bandwidth such as "3.5GB/s" or "800MiB/s" into bytes
// per second.
func ParseRate(s string) (float64, error) {
	t := strings.TrimSpace(s)
	if !strings.HasSuffix(strings.ToLower(t), "/s") {
		return 0, fmt.Errorf("rate %q must end in /s (e.g. 3.5GB/s)", s)
	}
	n, err := units.ParseSize(t[:len(t)-2])
	if err != nil {
		return 0, err
	}
	if n < 1<<20 {
		return 0, fmt.Errorf("rate %q is below 1 MiB/s", s)
	}
	return float64(n), nil
}
