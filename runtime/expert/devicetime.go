package expert

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
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
}

// Seconds returns the device time of a segment that reads bytes of
// weights and does flops operations.
func (c *Compute) Seconds(bytes int64, flops float64) float64 {
	return max(float64(bytes)/c.WeightBandwidth, flops/c.Throughput)
}

// computeYAML is the compute section of a profile file.
type computeYAML struct {
	WeightBandwidth string `yaml:"weight_bandwidth"`
	Throughput      string `yaml:"throughput"`
}

// Bounds of plausible compute speeds: below them a token of even a tiny
// model takes minutes, above them no device built or announced comes close.
const (
	minWeightBandwidth = 100e6  // 100 MB/s
	maxWeightBandwidth = 100e12 // 100 TB/s
	minThroughput      = 100e6  // 0.1 GFLOP/s
	maxThroughput      = 1e18   // 1 EFLOP/s
	// DefaultPageSize is the naive mode's page when a profile sets none.
	DefaultPageSize = 4 << 10
	maxPageSize     = 2 << 20
	// DirectReadAhead is the naive mode's read-ahead on direct storage
	// (no profile): Linux's default read_ahead_kb.
	DirectReadAhead = 128 << 10
	maxReadAhead    = 64 << 20
)

// parseDeviceExtras parses the compute section, page size and read-ahead
// of y into p.
func parseDeviceExtras(p *Profile, y *profileYAML) error {
	if y.Compute != nil {
		c, err := parseCompute(y.Compute)
		if err != nil {
			return fmt.Errorf("expert: profile %s: compute: %w", p.Name, err)
		}
		p.Compute = c
	}
	p.PageSize = DefaultPageSize
	if y.PageSize != "" {
		n, err := ParseSize(y.PageSize)
		if err != nil || n < 4096 || n > maxPageSize || n&(n-1) != 0 {
			return fmt.Errorf("expert: profile %s: page_size %q must be a power of two from 4KiB to 2MiB (4KiB on Android, 16KiB on iOS)", p.Name, y.PageSize)
		}
		p.PageSize = n
	}
	if y.ReadAhead != "" {
		n, err := ParseSize(y.ReadAhead)
		if err != nil || n > maxReadAhead {
			return fmt.Errorf("expert: profile %s: read_ahead %q must be a size from 0 to 64MiB (e.g. 128KiB)", p.Name, y.ReadAhead)
		}
		p.ReadAhead = roundUp(n, p.PageSize)
	}
	return nil
}

func parseCompute(y *computeYAML) (*Compute, error) {
	if y.WeightBandwidth == "" || y.Throughput == "" {
		return nil, errors.New("needs weight_bandwidth (e.g. 60GB/s) and throughput (e.g. 2TFLOP/s)")
	}
	bw, err := parsePositiveRate(y.WeightBandwidth, "B/s")
	if err != nil {
		return nil, fmt.Errorf("weight_bandwidth: %w", err)
	}
	if bw < minWeightBandwidth || bw > maxWeightBandwidth {
		return nil, fmt.Errorf("weight_bandwidth %q is outside the plausible 100MB/s to 100TB/s", y.WeightBandwidth)
	}
	fl, err := parsePositiveRate(y.Throughput, "FLOP/s")
	if err != nil {
		return nil, fmt.Errorf("throughput: %w", err)
	}
	if fl < minThroughput || fl > maxThroughput {
		return nil, fmt.Errorf("throughput %q is outside the plausible 0.1GFLOP/s to 1EFLOP/s", y.Throughput)
	}
	return &Compute{WeightBandwidth: bw, Throughput: fl}, nil
}

// parsePositiveRate parses a number with an SI prefix (k, M, G, T, P, E,
// powers of 1000) and the unit suffix, e.g. "60GB/s" or "2.5TFLOP/s".
func parsePositiveRate(s, unit string) (float64, error) {
	t := strings.TrimSpace(s)
	num, ok := strings.CutSuffix(t, unit)
	if !ok {
		return 0, fmt.Errorf("%q must end in %s (e.g. 2.5T%s)", s, unit, unit)
	}
	mult := 1.0
	if n := len(num); n > 0 {
		if m, ok := map[byte]float64{'k': 1e3, 'K': 1e3, 'M': 1e6, 'G': 1e9, 'T': 1e12, 'P': 1e15, 'E': 1e18}[num[n-1]]; ok {
			mult, num = m, num[:n-1]
		}
	}
	var v float64
	if _, err := fmt.Sscanf(strings.TrimSpace(num), "%g", &v); err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("%q is not a number with an optional k/M/G/T prefix and %s", s, unit)
	}
	if v <= 0 {
		return 0, fmt.Errorf("%q must be positive", s)
	}
	return v * mult, nil
}

// MarshalProfile returns p as profile YAML that ParseProfile reads back to
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
	}
	return []byte(b.String())
}

// exact formats x so that parsing gives x back bit for bit.
func exact(x float64) string { return strconv.FormatFloat(x, 'f', -1, 64) }

func yamlString(s string) string { return fmt.Sprintf("%q", s) }
