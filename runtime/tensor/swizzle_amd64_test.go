//go:build amd64 && !purego

package tensor

import "testing"

// TestPDEPFast checks which CPUs swizzle: PDEP is microcoded on AMD before
// Zen 3 and on Hygon.
func TestPDEPFast(t *testing.T) {
	tests := []struct {
		vendor string
		leaf1  uint32
		want   bool
	}{
		{"GenuineIntel", 0x000306c3, true},  // Haswell
		{"AuthenticAMD", 0x00800f12, false}, // Zen 1 (family 0x17)
		{"AuthenticAMD", 0x00830f10, false}, // Zen 2 (0x17)
		{"AuthenticAMD", 0x00a00f11, true},  // Zen 3 (0x19)
		{"AuthenticAMD", 0x00a60f12, true},  // Zen 4 (0x19)
		{"AuthenticAMD", 0x00b40f40, true},  // Zen 5 (0x1a)
		{"HygonGenuine", 0x00900f01, false},
	}
	for _, tc := range tests {
		if got := pdepFast(tc.vendor, tc.leaf1); got != tc.want {
			t.Errorf("pdepFast(%s, %#x) = %t, want %t", tc.vendor, tc.leaf1, got, tc.want)
		}
	}
	_, b, _, _ := cpuid(0, 0)
	if b == 0 {
		t.Fatal("cpuid(0) returned no vendor")
	}
}
