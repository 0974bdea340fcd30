// Package profile reads device storage profiles, the YAML files that
// describe a device's flash (bandwidth, per-read latency, queue depth), RAM
// and compute, and hands the runtime an expert.Profile. It is the edge at
// which profiles are parsed, so the runtime (std and x/sys only) needs no
// YAML parser: the command line, the agent and the coordinator call Load or
// Parse. The built-in profiles are embedded from builtin/.
package profile

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"math"
	"os"
	"sort"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/lesfarm/lesfarm/runtime/expert"
	"github.com/lesfarm/lesfarm/runtime/units"
)

//go:embed builtin/*.yaml
var builtinProfiles embed.FS

// profileYAML is the file form; sizes and rates are strings with units.
type profileYAML struct {
	Name        string       `yaml:"name"`
	Description string       `yaml:"description"`
	Bandwidth   string       `yaml:"bandwidth"`
	Latency     string       `yaml:"latency"`
	MaxInFlight int          `yaml:"max_in_flight"`
	RAMBudget   string       `yaml:"ram_budget"`
	PageSize    string       `yaml:"page_size,omitempty"`
	ReadAhead   string       `yaml:"read_ahead,omitempty"`
	Compute     *computeYAML `yaml:"compute,omitempty"`
	Service     *serviceYAML `yaml:"service_times,omitempty"`
}

// Builtin returns the names of the embedded profiles, sorted.
func Builtin() []string {
	ents, _ := builtinProfiles.ReadDir("builtin")
	var names []string
	for _, e := range ents {
		names = append(names, strings.TrimSuffix(e.Name(), ".yaml"))
	}
	sort.Strings(names)
	return names
}

// Load returns the built-in profile called name, or else parses the
// YAML file at that path.
func Load(name string) (*expert.Profile, error) {
	if data, err := builtinProfiles.ReadFile("builtin/" + name + ".yaml"); err == nil && !strings.ContainsAny(name, "/\\") {
		return Parse(data)
	}
	data, err := os.ReadFile(name)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("profile %q is neither a built-in (%s) nor a readable file", name, strings.Join(Builtin(), ", "))
		}
		return nil, fmt.Errorf("profile: %w", err)
	}
	p, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%w (file %s)", err, name)
	}
	return p, nil
}

// Parse parses and validates a profile in YAML. Unknown keys are
// errors so a typo cannot silently fall back to a default.
func Parse(data []byte) (*expert.Profile, error) {
	var y profileYAML
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&y); err != nil {
		return nil, fmt.Errorf("profile: invalid YAML: %s", oneLine(err.Error()))
	}
	p := &expert.Profile{Name: y.Name, Description: y.Description, MaxInFlight: y.MaxInFlight}
	if p.Name == "" {
		return nil, errors.New("profile: missing name")
	}
	bw, err := expert.ParseRate(y.Bandwidth)
	if err != nil {
		return nil, fmt.Errorf("profile %s: bandwidth: %w", p.Name, err)
	}
	p.Bandwidth = bw
	if y.Latency == "" {
		return nil, fmt.Errorf("profile %s: missing latency (e.g. latency: 100us)", p.Name)
	}
	lat, err := time.ParseDuration(y.Latency)
	if err != nil || lat < 0 || lat > 10*time.Second {
		return nil, fmt.Errorf("profile %s: latency %q is not a duration between 0 and 10s (e.g. 100us)", p.Name, y.Latency)
	}
	p.Latency = lat
	if p.MaxInFlight < 1 || p.MaxInFlight > 1024 {
		return nil, fmt.Errorf("profile %s: max_in_flight %d must be between 1 and 1024", p.Name, p.MaxInFlight)
	}
	if y.RAMBudget != "" {
		n, err := units.ParseSize(y.RAMBudget)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("profile %s: ram_budget %q is not a positive size (e.g. 8GiB)", p.Name, y.RAMBudget)
		}
		p.RAMBudget = n
	}
	if err := parseDeviceExtras(p, &y); err != nil {
		return nil, err
	}
	return p, nil
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

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
	maxReadAhead       = expert.MaxReadAhead
)

// parseDeviceExtras parses the compute section, page size, read-ahead
// and service-time table of y into p.
func parseDeviceExtras(p *expert.Profile, y *profileYAML) error {
	if y.Compute != nil {
		c, err := parseCompute(y.Compute)
		if err != nil {
			return fmt.Errorf("profile %s: compute: %w", p.Name, err)
		}
		p.Compute = c
	}
	p.PageSize = expert.DefaultPageSize
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

func parseCompute(y *computeYAML) (*expert.Compute, error) {
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
	c := &expert.Compute{WeightBandwidth: bw, Throughput: fl}
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
