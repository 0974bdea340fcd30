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

	"github.com/lesfarm/lesfarm/runtime/units"
)

// ByteSize is a size in bytes. In YAML and JSON it is an integer or a string
// with a unit: "512MiB", "2GB", "4 GiB", "1073741824". IEC units (KiB, MiB,
// GiB, TiB) are powers of 1024 and SI units (kB, MB, GB, TB) powers of 1000;
// "K", "M", "G", "T" alone mean the IEC units. It marshals as an integer.
type ByteSize int64

// ParseByteSize parses a size such as "512MiB", "1.5GB" or "4096" (the
// rules of units.ParseSize).
func ParseByteSize(s string) (ByteSize, error) {
	n, err := units.ParseSize(s)
	return ByteSize(n), err
}

// String formats the size with the largest IEC unit that divides it exactly.
func (b ByteSize) String() string { return units.FormatSize(int64(b)) }

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
// fraction of the model's total expert bytes (units.Budget, the one
// definition). The zero Budget means "not set" (the resident mode needs
// none).
//
// In YAML and JSON it is a string or a number: "25%" and 0.25 are a
// fraction; "512MiB", "2GB" and integers greater than 1 are bytes; 1 and
// "100%" mean all experts.
type Budget units.Budget

// IsZero reports whether the budget is unset.
func (b Budget) IsZero() bool { return units.Budget(b).IsZero() }

// String formats the budget as it is written in a spec: "25%" or "512MiB".
func (b Budget) String() string { return units.Budget(b).String() }

// Resolve returns the budget in bytes for a model whose experts take
// expertBytes in total.
func (b Budget) Resolve(expertBytes int64) int64 { return units.Budget(b).Resolve(expertBytes) }

// ParseBudget parses "25%", "0.25", "512MiB" or "1073741824" (the rules of
// units.ParseBudget).
func ParseBudget(s string) (Budget, error) {
	b, err := units.ParseBudget(s)
	return Budget(b), err
}

func budgetFromNumber(f float64) (Budget, error) {
	b, err := units.BudgetOf(f)
	return Budget(b), err
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
