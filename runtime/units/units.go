// Package units parses and formats the byte sizes and expert budgets that
// every command, job spec and storage profile of lesfarm accepts, so
// "512MiB", "2G" or "25%" mean the same everywhere. It imports only the
// standard library, so the runtime and the farm share it.
package units

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// sizeUnits maps a lower-case unit to its multiplier: IEC units (KiB, MiB,
// GiB, TiB) and K, M, G, T alone are powers of 1024; SI units (kB, MB, GB,
// TB) powers of 1000.
var sizeUnits = map[string]float64{
	"": 1, "b": 1,
	"k": 1 << 10, "kib": 1 << 10, "kb": 1e3,
	"m": 1 << 20, "mib": 1 << 20, "mb": 1e6,
	"g": 1 << 30, "gib": 1 << 30, "gb": 1e9,
	"t": 1 << 40, "tib": 1 << 40, "tb": 1e12,
}

// ParseSize parses a byte size: a non-negative number with an optional unit,
// such as "4096", "512MiB", "4 GiB", "1.5GB" or "2G" (IEC units and K/M/G/T
// alone are powers of 1024, kB/MB/GB/TB powers of 1000). Fractional bytes
// round to the nearest byte. It returns a one-line error for an empty,
// negative, non-finite, overflowing or unknown-unit size.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, errors.New("empty size (want bytes or a number with a unit such as 512MiB or 2GB)")
	}
	i := len(t)
	for i > 0 && (t[i-1] < '0' || t[i-1] > '9') && t[i-1] != '.' {
		i--
	}
	num, unit := strings.TrimSpace(t[:i]), strings.ToLower(strings.TrimSpace(t[i:]))
	mult, ok := sizeUnits[unit]
	if !ok {
		return 0, fmt.Errorf("size %q has an unknown unit %q (use B, KiB, MiB, GiB, TiB, kB, MB, GB, TB)", s, t[i:])
	}
	if n, err := strconv.ParseInt(num, 10, 64); err == nil {
		if n < 0 {
			return 0, fmt.Errorf("size %q is negative", s)
		}
		if m := int64(mult); n > math.MaxInt64/m {
			return 0, fmt.Errorf("size %q overflows", s)
		}
		return n * int64(mult), nil
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("size %q is not a number with an optional unit (e.g. 512MiB or 2GB)", s)
	}
	if v < 0 {
		return 0, fmt.Errorf("size %q is negative", s)
	}
	if f := v * mult; f < math.MaxInt64 {
		return int64(math.Round(f)), nil
	}
	return 0, fmt.Errorf("size %q overflows", s)
}

// FormatSize formats n with the largest IEC unit that divides it exactly
// ("512MiB", "3GiB"), else as plain bytes; ParseSize reads it back.
func FormatSize(n int64) string {
	for _, u := range []struct {
		s string
		m int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n != 0 && n%u.m == 0 {
			return strconv.FormatInt(n/u.m, 10) + u.s
		}
	}
	return strconv.FormatInt(n, 10)
}

// HumanSize formats n approximately for tables: "1.50 GiB", "12.00 MiB",
// "3.00 KiB".
func HumanSize(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%.2f KiB", float64(n)/(1<<10))
}

// Budget is an expert cache budget: either an absolute number of bytes or a
// fraction of the model's total expert bytes. The zero Budget means "not
// set".
type Budget struct {
	Bytes    int64   // absolute budget; 0 when Fraction is used
	Fraction float64 // fraction of the expert bytes in (0, 1]; 0 when Bytes is used
}

// IsZero reports whether the budget is unset.
func (b Budget) IsZero() bool { return b.Bytes == 0 && b.Fraction == 0 }

// String formats the budget as ParseBudget reads it: "25%" or "512MiB"
// ("" when unset).
func (b Budget) String() string {
	switch {
	case b.Fraction != 0:
		return strconv.FormatFloat(b.Fraction*100, 'f', -1, 64) + "%"
	case b.Bytes != 0:
		return FormatSize(b.Bytes)
	}
	return ""
}

// Resolve returns the budget in bytes for a model whose experts take
// expertBytes in total: Bytes, or Fraction × expertBytes rounded to the
// nearest byte.
func (b Budget) Resolve(expertBytes int64) int64 {
	if b.Fraction != 0 {
		return int64(math.Round(b.Fraction * float64(expertBytes)))
	}
	return b.Bytes
}

// ParseBudget parses an expert budget: a percentage in (0, 100] ("25%"), a
// number in (0, 1] (a fraction: "0.25"; "1" is every expert), a whole number
// of bytes above 1 ("1073741824") or a size with a unit ("512MiB"). It
// returns a one-line error otherwise (including for 0, which would be no
// budget at all).
func ParseBudget(s string) (Budget, error) {
	t := strings.TrimSpace(s)
	bad := func() (Budget, error) {
		return Budget{}, fmt.Errorf("budget %q is neither a fraction in (0, 1] (e.g. 0.2 or 20%%) nor a size (e.g. 512MiB)", s)
	}
	if p, ok := strings.CutSuffix(t, "%"); ok {
		f, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
		if err != nil || !(f > 0 && f <= 100) {
			return Budget{}, fmt.Errorf("budget %q: a percentage must be in (0, 100]", s)
		}
		return Budget{Fraction: f / 100}, nil
	}
	if f, err := strconv.ParseFloat(t, 64); err == nil {
		return BudgetOf(f)
	}
	n, err := ParseSize(t)
	if err != nil || n < 1 {
		return bad()
	}
	return Budget{Bytes: n}, nil
}

// BudgetOf is the budget a plain number means: a fraction in (0, 1], or a
// whole number of bytes above 1.
func BudgetOf(f float64) (Budget, error) {
	switch {
	case math.IsNaN(f) || math.IsInf(f, 0) || f <= 0:
		return Budget{}, fmt.Errorf("budget %v must be a fraction in (0, 1] or a whole number of bytes", f)
	case f <= 1:
		return Budget{Fraction: f}, nil
	case f != math.Trunc(f) || f >= math.MaxInt64:
		return Budget{}, fmt.Errorf("budget %v: a number above 1 is a whole number of bytes", f)
	}
	return Budget{Bytes: int64(f)}, nil
}
