package units

import (
	"testing"
)

func TestParseSize(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"4096", 4096, true}, {"0", 0, true}, {"1KiB", 1024, true}, {"4k", 4096, true}, {"1kb", 1000, true},
		{"1.5GB", 1.5e9, true}, {"1.5GiB", 3 << 29, true}, {"2G", 2 << 30, true}, {"512 MiB", 512 << 20, true},
		{"7 MiB", 7 << 20, true}, {"2GB", 2e9, true}, {" 3B ", 3, true},
		{"", 0, false}, {"x", 0, false}, {"5XB", 0, false}, {"-1", 0, false}, {"-1KiB", 0, false},
		{"1e30TB", 0, false}, {"1e400", 0, false}, {"99999999999TiB", 0, false}, {"NaN", 0, false}, {"0x10", 0, false},
	} {
		got, err := ParseSize(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func TestFormatSize(t *testing.T) {
	t.Parallel()
	for n, want := range map[int64]string{0: "0", 1000: "1000", 1024: "1KiB", 512 << 20: "512MiB", 3 << 30: "3GiB", 1<<40 + 1: "1099511627777"} {
		if got := FormatSize(n); got != want {
			t.Errorf("FormatSize(%d) = %q, want %q", n, got, want)
		}
		if back, err := ParseSize(FormatSize(n)); err != nil || back != n {
			t.Errorf("ParseSize(FormatSize(%d)) = %d, %v", n, back, err)
		}
	}
}

func TestParseBudget(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want Budget
		ok   bool
	}{
		{"0.2", Budget{Fraction: 0.2}, true}, {"20%", Budget{Fraction: 0.2}, true}, {"25 %", Budget{Fraction: 0.25}, true},
		{"1", Budget{Fraction: 1}, true}, {"100%", Budget{Fraction: 1}, true},
		{"512MiB", Budget{Bytes: 512 << 20}, true}, {"4096", Budget{Bytes: 4096}, true}, {"2GiB", Budget{Bytes: 2 << 30}, true},
		{"0", Budget{}, false}, {"-1", Budget{}, false}, {"150%", Budget{}, false}, {"0%", Budget{}, false}, {"%", Budget{}, false},
		{"1.5", Budget{}, false}, {"lots", Budget{}, false}, {"NaN%", Budget{}, false}, {"", Budget{}, false}, {"0B", Budget{}, false},
	} {
		got, err := ParseBudget(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseBudget(%q) = %+v, %v; want %+v ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
		if err == nil {
			if again, err := ParseBudget(got.String()); err != nil || again != got {
				t.Errorf("ParseBudget(String(%q) = %q) = %+v, %v", tc.in, got.String(), again, err)
			}
		}
	}
	if got := (Budget{Fraction: 0.25}).Resolve(1001); got != 250 {
		t.Errorf("25%% of 1001 = %d, want 250 (rounded)", got)
	}
	if got := (Budget{Bytes: 7}).Resolve(1 << 30); got != 7 {
		t.Errorf("bytes budget resolved to %d", got)
	}
}

func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"4096", "512MiB", "1.5GB", "2G", "-1", "1e400", "NaN", "0x10", "99999999999TiB"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseSize(s)
		if err == nil && n < 0 {
			t.Fatalf("ParseSize(%q) = %d", s, n)
		}
	})
}

func FuzzParseBudget(f *testing.F) {
	for _, s := range []string{"0.2", "20%", "1", "512MiB", "4096", "0", "-1", "150%", "1e309", "NaN", "0x10"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b, err := ParseBudget(s)
		if err != nil {
			return
		}
		if (b.Bytes > 0) == (b.Fraction > 0) || b.Bytes < 0 || b.Fraction < 0 || b.Fraction > 1 {
			t.Fatalf("ParseBudget(%q) = %+v", s, b)
		}
	})
}
