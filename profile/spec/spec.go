// Package spec is a device profile as data: the YAML file that describes a
// device's flash (bandwidth, per-read latency, queue depth, measured
// service times), RAM and compute, parsed and validated into plain values.
// It imports no runtime package but the units leaf, so the coordinator can
// validate and store the profiles devices upload without linking the
// runtime; package profile converts a Profile into the runtime's
// expert.Profile. The built-in profiles are embedded from builtin/.
package spec

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/lesfarm/lesfarm/runtime/units"
)

//go:embed builtin/*.yaml
var builtinProfiles embed.FS

// Profile is a validated device profile. Its fields mean what
// expert.Profile's do: reads take Latency each, overlap up to MaxInFlight
// and share Bandwidth, unless Service prices them.
type Profile struct {
	Name        string
	Description string
	Bandwidth   float64       // bytes per second, aggregate over reads in flight
	Latency     time.Duration // fixed cost of each read
	MaxInFlight int           // reads the device serves concurrently
	RAMBudget   int64         // bytes of RAM for the whole process; 0 = unset
	// Compute is the device's decode speed; nil when the file has none.
	Compute *Compute
	// PageSize (DefaultPageSize when the file sets none) and ReadAhead (a
	// multiple of PageSize) shape the naive mode's mmap-like reads.
	PageSize  int64
	ReadAhead int64
	// Service is the measured service-time table; nil when the file has
	// none.
	Service *ServiceTable
}

// Compute is a profile's compute section (expert.Compute).
type Compute struct {
	WeightBandwidth float64       // bytes per second
	Throughput      float64       // FLOP/s
	PageCost        time.Duration // CPU time per page a naive fault reads; 0: none
}

// ServiceTable is a profile's measured read service times
// (expert.ServiceTimes): Times[i][j] is the mean time of a read of
// Sizes[i] bytes at queue depth QueueDepths[j]. Sizes and depths increase.
// Patterns is nil when no row named its pattern, else one per size.
type ServiceTable struct {
	Sizes       []int64
	QueueDepths []int
	Times       [][]time.Duration
	Patterns    []string
}

// Read patterns of a service-time row (expert.Pattern*).
const (
	PatternRandom = "random"
	PatternLayer  = "layer"
	PatternPages  = "pages"
)

// DefaultPageSize is the page of a profile that sets none
// (expert.DefaultPageSize); MaxReadAhead the largest read-ahead one may
// declare (expert.MaxReadAhead).
const (
	DefaultPageSize = 4 << 10
	MaxReadAhead    = 64 << 20
)

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

// BuiltinYAML returns the file of the embedded profile called name.
func BuiltinYAML(name string) ([]byte, bool) {
	if strings.ContainsAny(name, "/\\") {
		return nil, false
	}
	data, err := builtinProfiles.ReadFile("builtin/" + name + ".yaml")
	return data, err == nil
}

// Load returns the built-in profile called name, or else parses the YAML
// file at that path. Errors are one line; a bad file's names the file.
func Load(name string) (*Profile, error) {
	if data, ok := BuiltinYAML(name); ok {
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

// Parse parses and validates a profile in YAML. Unknown keys are errors so
// a typo cannot silently fall back to a default. Errors are one line.
func Parse(data []byte) (*Profile, error) {
	var y profileYAML
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&y); err != nil {
		return nil, fmt.Errorf("profile: invalid YAML: %s", oneLine(err.Error()))
	}
	p := &Profile{Name: y.Name, Description: y.Description, MaxInFlight: y.MaxInFlight}
	if p.Name == "" {
		return nil, errors.New("profile: missing name")
	}
	bw, err := ParseRate(y.Bandwidth)
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

// ParseRate parses a bandwidth such as "3.5GB/s" or "800MiB/s" into bytes
// per second; rates below 1 MiB/s are refused.
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

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
