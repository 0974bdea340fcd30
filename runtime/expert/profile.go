package expert

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

//go:embed profiles/*.yaml
var builtinProfiles embed.FS

// Profile describes a device's storage, so the store can emulate it: reads
// through a profile take Latency each (overlapping up to MaxInFlight reads)
// and share Bandwidth. RAMBudget, when set, caps the expert budget.
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
}

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
}

// BuiltinProfiles returns the names of the embedded profiles, sorted.
func BuiltinProfiles() []string {
	ents, _ := builtinProfiles.ReadDir("profiles")
	var names []string
	for _, e := range ents {
		names = append(names, strings.TrimSuffix(e.Name(), ".yaml"))
	}
	sort.Strings(names)
	return names
}

// LoadProfile returns the built-in profile called name, or else parses the
// YAML file at that path.
func LoadProfile(name string) (*Profile, error) {
	if data, err := builtinProfiles.ReadFile("profiles/" + name + ".yaml"); err == nil && !strings.ContainsAny(name, "/\\") {
		return ParseProfile(data)
	}
	data, err := os.ReadFile(name)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("expert: profile %q is neither a built-in (%s) nor a readable file", name, strings.Join(BuiltinProfiles(), ", "))
		}
		return nil, fmt.Errorf("expert: profile: %w", err)
	}
	p, err := ParseProfile(data)
	if err != nil {
		return nil, fmt.Errorf("%w (file %s)", err, name)
	}
	return p, nil
}

// ParseProfile parses and validates a profile in YAML. Unknown keys are
// errors so a typo cannot silently fall back to a default.
func ParseProfile(data []byte) (*Profile, error) {
	var y profileYAML
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&y); err != nil {
		return nil, fmt.Errorf("expert: profile: invalid YAML: %s", oneLine(err.Error()))
	}
	p := &Profile{Name: y.Name, Description: y.Description, MaxInFlight: y.MaxInFlight}
	if p.Name == "" {
		return nil, errors.New("expert: profile: missing name")
	}
	bw, err := ParseRate(y.Bandwidth)
	if err != nil {
		return nil, fmt.Errorf("expert: profile %s: bandwidth: %w", p.Name, err)
	}
	p.Bandwidth = bw
	if y.Latency == "" {
		return nil, fmt.Errorf("expert: profile %s: missing latency (e.g. latency: 100us)", p.Name)
	}
	lat, err := time.ParseDuration(y.Latency)
	if err != nil || lat < 0 || lat > 10*time.Second {
		return nil, fmt.Errorf("expert: profile %s: latency %q is not a duration between 0 and 10s (e.g. 100us)", p.Name, y.Latency)
	}
	p.Latency = lat
	if p.MaxInFlight < 1 || p.MaxInFlight > 1024 {
		return nil, fmt.Errorf("expert: profile %s: max_in_flight %d must be between 1 and 1024", p.Name, p.MaxInFlight)
	}
	if y.RAMBudget != "" {
		n, err := ParseSize(y.RAMBudget)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("expert: profile %s: ram_budget %q is not a positive size (e.g. 8GiB)", p.Name, y.RAMBudget)
		}
		p.RAMBudget = n
	}
	if err := parseDeviceExtras(p, &y); err != nil {
		return nil, err
	}
	return p, nil
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

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
