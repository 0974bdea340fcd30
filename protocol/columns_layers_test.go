package protocol

import (
	"encoding/binary"
	"slices"
	"testing"
)

// FuzzLayerCounts checks that layerCounts, with its one-byte fast path,
// reads the same counts, leaves the same rest and reports an error exactly
// when reading each count with i32 does.
func FuzzLayerCounts(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 0x7f, 0x80, 0x01, 5}, uint8(6))
	f.Add(binary.AppendVarint(binary.AppendVarint(nil, -1<<31), 1<<31), uint8(2))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, uint8(1))
	f.Add([]byte{4, 0x80}, uint8(3))
	f.Fuzz(func(t *testing.T, data []byte, n uint8) {
		fast, slow := make([]int32, n), make([]int32, n)
		rf, rs := varintReader{b: data}, varintReader{b: data}
		rf.layerCounts(fast)
		for j := range slow {
			slow[j] = rs.i32("layer count")
		}
		if (rf.err == nil) != (rs.err == nil) || len(rf.b) != len(rs.b) {
			t.Fatalf("err %v / %v, rest %d / %d bytes", rf.err, rs.err, len(rf.b), len(rs.b))
		}
		if rs.err == nil && !slices.Equal(fast, slow) {
			t.Fatalf("counts %v, want %v", fast, slow)
		}
	})
}
