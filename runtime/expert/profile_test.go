package expert

import "testing"

func TestParseSize(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"4096", 4096, true}, {"1KiB", 1024, true}, {"1kb", 1000, true}, {"1.5GB", 1.5e9, true},
		{"2G", 2 << 30, true}, {"512 MiB", 512 << 20, true}, {"", 0, false}, {"x", 0, false},
		{"5XB", 0, false}, {"-1", 0, false}, {"1e30TB", 0, false},
	}
	for _, tc := range tests {
		got, err := ParseSize(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}
