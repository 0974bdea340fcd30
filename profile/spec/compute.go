package spec

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/lesfarm/lesfarm/runtime/units"
)

// computeYAML is the compute section of a profile file.
type computeYAML struct {
	WeightBandwidth string `yaml:"weight_bandwidth"`
	Throughput      string `yaml:"throughput"`
	PageCost        string `yaml:"page_cost,omitempty"`
}

// Bounds of plausible compute speeds: below them a token of even a tiny
// model takes minutes, above them no device built or announced comes close.
const (
	minWeightBandwidth = 100e6  // 100 MB/s
	maxWeightBandwidth = 100e12 // 100 TB/s
	minThroughput      = 100e6  // 0.1 GFLOP/s
	maxThroughput      = 1e18   // 1 EFLOP/s
	maxPageSize        = 2 << 20
	maxPageCost        = 100 * time.Microsecond
	maxReadAhead       = MaxReadAhead
)

// parseDeviceExtras parses the compute section, page size, read-ahead
// and service-time table of y into p.
func parseDeviceExtras(p *Profile, y *profileYAML) error {
	if y.Compute != nil {
		c, err := parseCompute(y.Compute)
		if err != nil {
			return fmt.Errorf("profile %s: compute: %w", p.Name, err)
		}
		p.Compute = c
	}
	p.PageSize = DefaultPageSize
	if y.PageSize != "" {
		n, err := units.ParseSize(y.PageSize)
		if err != nil || n < 4096 || n > maxPageSize || n&(n-1) != 0 {
			return fmt.Errorf("profile %s: page_size %q must be a power of two from 4KiB to 2MiB (4KiB on Android, 16KiB on iOS)", p.Name, y.PageSize)
		}
		p.PageSize = n
	}
	if y.ReadAhead != "" {
		n, err := units.ParseSize(y.ReadAhead)
		if err != nil || n > maxReadAhead {
			return fmt.Errorf("profile %s: read_ahead %q must be a size from 0 to 64MiB (e.g. 128KiB)", p.Name, y.ReadAhead)
		}
		p.ReadAhead = roundUp(n, p.PageSize)
	}
	if y.Service != nil {
		st, err := parseServiceTimes(y.Service)
		if err != nil {
			return fmt.Errorf("profile %s: service_times: %w", p.Name, err)
		}
		p.Service = st
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
	c := &Compute{WeightBandwidth: bw, Throughput: fl}
	if y.PageCost != "" {
		d, err := time.ParseDuration(strings.TrimSpace(y.PageCost))
		if err != nil || d < 0 || d > maxPageCost {
			return nil, fmt.Errorf("page_cost %q must be a duration from 0 to 100us (CPU time per page read into the page cache, e.g. 150ns)", y.PageCost)
		}
		c.PageCost = d
	}
	return c, nil
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

func roundUp(n, a int64) int64 { return (n + a - 1) / a * a }
