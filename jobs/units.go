package jobs

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// ByteSize is a size in bytes. In YAML and JSON it is an integer or a string
// with a unit: "512MiB", "2GB", "4 GiB", "1073741824". IEC units (KiB, MiB,
// GiB, TiB) are powers of 1024 and SI units (kB, MB, GB, TB) powers of 1000;
// "K", "M", "G", "T" alone mean the IEC units. It marshals as an integer.
type ByteSize int64

var byteUnits = []struct {
	suffix string
	mult   int64
}{
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1 << 40},
	{"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12},
	{"k", 1 << 10}, {"m", 1 << 20}, {"g", 1 << 30}, {"t", 1 << 40},
	{"b", 1},
}

// ParseByteSize parses a size such as "512MiB", "1.5GB" or "4096".
func ParseByteSize(s string) (ByteSize, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	if t == "" {
		return 0, errors.New("empty size")
	}
	mult := int64(1)
	for _, u := range byteUnits {
		if strings.HasSuffix(t, u.suffix) {
			mult = u.mult
			t = strings.TrimSpace(strings.TrimSuffix(t, u.suffix))
			break
		}
	}
	if n, err := strconv.ParseInt(t, 10, 64); err == nil {
		if n < 0 {
			return 0, fmt.Errorf("negative size %q", s)
		}
		if mult > 1 && n > math.MaxInt64/mult {
			return 0, fmt.Errorf("size %q overflows", s)
		}
		return ByteSize(n * mult), nil
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("invalid size %q (want bytes or a number with a unit such as 512MiB or 2GB)", s)
	}
	if f < 0 {
		return 0, fmt.Errorf("negative size %q", s)
	}
	v := f * float64(mult)
	if v >= math.MaxInt64 {
		return 0, fmt.Errorf("size %q overflows", s)
	}
	return ByteSize(math.Round(v)), nil
}

// String formats the size with the largest IEC unit that divides it exactly.
func (b ByteSize) String() string {
	for _, u := range []struct {
		s string
		m int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if b != 0 && int64(b)%u.m == 0 {
			return strconv.FormatInt(int64(b)/u.m, 10) + u.s
		}
	}
	return strconv.FormatInt(int64(b), 10)
}

// UnmarshalJSON implements json.Unmarshaler.
func (b *ByteSize) UnmarshalJSON(data []byte) error {
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	n, err := byteSizeFrom(v)
	if err != nil {
		return err
	}
	*b = n
	return nil
}

// UnmarshalYAML implements yaml.Unmarshaler.
func (b *ByteSize) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return errors.New("want a size such as 4GiB")
	}
	v, err := ParseByteSize(n.Value)
	if err != nil {
		return err
	}
	*b = v
	return nil
}

func byteSizeFrom(v any) (ByteSize, error) {
	switch x := v.(type) {
	case float64:
		if x < 0 || x != math.Trunc(x) || x >= math.MaxInt64 {
			return 0, fmt.Errorf("invalid size %v (want a non-negative integer number of bytes)", x)
		}
		return ByteSize(x), nil
	case string:
		return ParseByteSize(x)
	}
	return 0, errors.New("want a size such as 4GiB or a number of bytes")
}

// Budget is an expert cache budget: either an absolute number of bytes or a
// fraction of the model's total expert bytes. The zero Budget means "not
// set" (the resident mode needs none).
//
// In YAML and JSON it is a string or a number: "25%" and 0.25 are a
// fraction; "512MiB", "2GB" and integers greater than 1 are bytes; 1 and
// "100%" mean all experts.
type Budget struct {
	Bytes    int64   // absolute budget; 0 when Fraction is used
	Fraction float64 // fraction of the expert bytes in (0, 1]; 0 when Bytes is used
}

// IsZero reports whether the budget is unset.
func (b Budget) IsZero() bool { return b.Bytes == 0 && b.Fraction == 0 }

// String formats the budget as it is written in a spec: "25%" or "512MiB".
func (b Budget) String() string {
	switch {
	case b.Fraction != 0:
		return strconv.FormatFloat(b.Fraction*100, 'f', -1, 64) + "%"
	case b.Bytes != 0:
		return ByteSize(b.Bytes).String()
	}
	return ""
}

// Resolve returns the budget in bytes for a model whose experts take
// expertBytes in total.
func (b Budget) Resolve(expertBytes int64) int64 {
	if b.Fraction != 0 {
		return int64(math.Round(b.Fraction * float64(expertBytes)))
	}
	return b.Bytes
}

// ParseBudget parses "25%", "0.25", "512MiB" or "1073741824".
func ParseBudget(s string) (Budget, error) {
	t := strings.TrimSpace(s)
	if strings.HasSuffix(t, "%") {
		f, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(t, "%")), 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return Budget{}, fmt.Errorf("invalid budget %q (want e.g. 25%% or 512MiB)", s)
		}
		return Budget{Fraction: f / 100}, nil
	}
	if f, err := strconv.ParseFloat(t, 64); err == nil {
		return budgetFromNumber(f)
	}
	n, err := ParseByteSize(t)
	if err != nil {
		return Budget{}, fmt.Errorf("invalid budget %q (want e.g. 25%% or 512MiB)", s)
	}
	return Budget{Bytes: int64(n)}, nil
}

func budgetFromNumber(f float64) (Budget, error) {
	switch {
	case math.IsNaN(f) || math.IsInf(f, 0):
		return Budget{}, fmt.Errorf("invalid budget %v", f)
	case f <= 1:
		return Budget{Fraction: f}, nil
	case f != math.Trunc(f) || f >= math.MaxInt64:
		return Budget{}, fmt.Errorf("invalid budget %v (a number above 1 is a whole number of bytes)", f)
	}
	return Budget{Bytes: int64(f)}, nil
}

// MarshalJSON implements json.Marshaler: the budget is a string.
func (b Budget) MarshalJSON() ([]byte, error) { return json.Marshal(b.String()) }

// MarshalYAML implements yaml.Marshaler.
func (b Budget) MarshalYAML() (any, error) { return b.String(), nil }

// UnmarshalJSON implements json.Unmarshaler.
func (b *Budget) UnmarshalJSON(data []byte) error {
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	var err error
	switch x := v.(type) {
	case float64:
		*b, err = budgetFromNumber(x)
	case string:
		*b, err = ParseBudget(x)
	default:
		err = errors.New("want a budget such as \"25%\" or \"512MiB\"")
	}
	return err
}

// UnmarshalYAML implements yaml.Unmarshaler.
func (b *Budget) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return errors.New("want a budget such as 25% or 512MiB")
	}
	v, err := ParseBudget(n.Value)
	if err != nil {
		return err
	}
	*b = v
	return nil
}

// Duration is a time.Duration written as a Go duration string ("30s",
// "10m") or a number of seconds. It marshals as a string.
type Duration time.Duration

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// String implements fmt.Stringer.
func (d Duration) String() string { return time.Duration(d).String() }

// ParseDuration parses "30s", "1m30s" or a number of seconds such as "90".
func ParseDuration(s string) (Duration, error) {
	t := strings.TrimSpace(s)
	if f, err := strconv.ParseFloat(t, 64); err == nil {
		return secondsDuration(f)
	}
	d, err := time.ParseDuration(t)
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q (want e.g. 30s, 10m or a number of seconds)", s)
	}
	return Duration(d), nil
}

func secondsDuration(f float64) (Duration, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) || math.Abs(f) > float64(math.MaxInt64)/float64(time.Second) {
		return 0, fmt.Errorf("invalid duration %v seconds", f)
	}
	return Duration(f * float64(time.Second)), nil
}

// MarshalJSON implements json.Marshaler.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// MarshalYAML implements yaml.Marshaler.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// UnmarshalJSON implements json.Unmarshaler.
func (d *Duration) UnmarshalJSON(data []byte) error {
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	var err error
	switch x := v.(type) {
	case float64:
		*d, err = secondsDuration(x)
	case string:
		*d, err = ParseDuration(x)
	default:
		err = errors.New("want a duration such as \"30s\"")
	}
	return err
}

// UnmarshalYAML implements yaml.Unmarshaler.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return errors.New("want a duration such as 30s")
	}
	v, err := ParseDuration(n.Value)
	if err != nil {
		return err
	}
	*d = v
	return nil
}
