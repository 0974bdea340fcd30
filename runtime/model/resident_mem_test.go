package model

import (
	"testing"
	"unsafe"
)

// TestResidentBytes checks the resident weight buffers: exactly n zeroed
// bytes (capacity n, so an append cannot run into the alignment slack),
// and slices of 4 MiB or more starting on a huge page boundary.
func TestResidentBytes(t *testing.T) {
	for _, n := range []int64{0, 1, 4095, 4096, 4<<20 - 1, 4 << 20, 5<<20 + 3} {
		b := residentBytes(n)
		if int64(len(b)) != n || int64(cap(b)) != n {
			t.Fatalf("residentBytes(%d): len %d cap %d", n, len(b), cap(b))
		}
		for i, v := range b {
			if v != 0 {
				t.Fatalf("residentBytes(%d)[%d] = %d, want 0", n, i, v)
			}
		}
		if n >= 4<<20 {
			if r := uintptr(unsafe.Pointer(&b[0])) % hugePage; r != 0 {
				t.Errorf("residentBytes(%d) starts %d bytes past a huge page boundary", n, r)
			}
		}
	}
}
