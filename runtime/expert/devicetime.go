package expert

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Compute is a device's decode compute speed, the part of a profile that
// device time needs (see deviceclock.go). The model is a roofline per
// compute segment: a segment that streams B bytes of weights and does F
// floating-point operations takes max(B/WeightBandwidth, F/Throughput)
// seconds on the device. Decode of a quantized MoE on a phone's GPU or NPU
// is bound by the first term (weights are read once per token), so
// WeightBandwidth is the figure that matters; Throughput caps segments
// whose arithmetic dominates.
type Compute struct {
	// WeightBandwidth is the effective rate, in bytes per second, at which
	// the device's decode kernels stream weights from RAM (a fraction of
	// the DRAM bandwidth).
	WeightBandwidth float64
	// Throughput is the sustained arithmetic rate of decode, in FLOP/s.
	Throughput float64
	// PageCost is the device's CPU time per page a naive fault reads into
	// the page cache (the kernel's page-cache insertion and LRU work, which
	// an O_DIRECT read grid does not include); 0 charges none. The naive
	// mode's clock charges it as compute per page read (MeasurePageCost).
	PageCost time.Duration
}

// Seconds returns the device time of a segment that reads bytes of
// weights and does flops operations.
func (c *Compute) Seconds(bytes int64, flops float64) float64 {
	return max(float64(bytes)/c.WeightBandwidth, flops/c.Throughput)
}

const (
	// DefaultPageSize is the naive mode's page when a profile sets none.
	DefaultPageSize = 4 << 10
	// DirectReadAhead is the naive mode's read-ahead on direct storage
	// (no profile) where the device's (DeviceReadAhead) is unknown:
	// Linux's default read_ahead_kb.
	DirectReadAhead = 128 << 10
	// MaxReadAhead is the largest read-ahead a profile may declare and
	// DeviceReadAhead reports.
	MaxReadAhead = 64 << 20
)

// MarshalProfile returns p as profile YAML that profile.Parse reads back to
// the same values, with header as leading comment lines (e.g. how and when
// it was measured).
func MarshalProfile(p *Profile, header string) []byte {
	var b strings.Builder
	for _, l := range strings.Split(strings.TrimSpace(header), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			b.WriteString("# " + l + "\n")
		}
	}
	fmt.Fprintf(&b, "name: %s\n", yamlString(p.Name))
	if p.Description != "" {
		fmt.Fprintf(&b, "description: %s\n", yamlString(p.Description))
	}
	fmt.Fprintf(&b, "bandwidth: %sB/s\n", exact(p.Bandwidth))
	fmt.Fprintf(&b, "latency: %s\n", p.Latency)
	fmt.Fprintf(&b, "max_in_flight: %d\n", p.MaxInFlight)
	if p.RAMBudget > 0 {
		fmt.Fprintf(&b, "ram_budget: %d\n", p.RAMBudget)
	}
	if p.PageSize > 0 {
		fmt.Fprintf(&b, "page_size: %d\n", p.PageSize)
	}
	if p.ReadAhead > 0 {
		fmt.Fprintf(&b, "read_ahead: %d\n", p.ReadAhead)
	}
	if c := p.Compute; c != nil {
		fmt.Fprintf(&b, "compute:\n  weight_bandwidth: %sB/s\n  throughput: %sFLOP/s\n", exact(c.WeightBandwidth), exact(c.Throughput))
		if c.PageCost > 0 {
			fmt.Fprintf(&b, "  page_cost: %s\n", c.PageCost)
		}
	}
	if p.Service != nil {
		p.Service.marshal(&b)
	}
	return []byte(b.String())
}

// exact formats x so that parsing gives x back bit for bit.
func exact(x float64) string { return strconv.FormatFloat(x, 'f', -1, 64) }

func yamlString(s string) string { return fmt.Sprintf("%q", s) }
