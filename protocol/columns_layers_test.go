package protocol

import (
	"encoding/binary"
	"reflect"
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

// TestLayerCountsSlabs decodes a batch whose samples have different
// depths (48, none, 6, 48, 1 layers) and checks every sample's counts
// round-trip and that the samples' arrays do not overlap: appending to one
// sample's counts leaves the next sample's unchanged.
func TestLayerCountsSlabs(t *testing.T) {
	depths := []int{48, 0, 6, 48, 1}
	in := &TelemetryBatch{RunID: 1, Token: 1, DeviceID: "d", SentAt: t0}
	for i, l := range depths {
		s := Sample{ConfigIndex: 0, Step: i, Phase: PhaseDecode, Tokens: 1}
		if l > 0 {
			lc := &LayerCounts{Hits: make([]int32, l), Misses: make([]int32, l), PrefetchUsed: make([]int32, l), PrefetchWasted: make([]int32, l)}
			for j := range l {
				lc.Hits[j], lc.Misses[j], lc.PrefetchUsed[j], lc.PrefetchWasted[j] = int32(i*100+j), int32(j%3), int32(j%2), int32(i)
			}
			s.Layers = lc
		}
		in.Samples = append(in.Samples, s)
	}
	data, err := Encode(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := DecodeTelemetry(data)
	if err != nil {
		t.Fatal(err)
	}
	for i := range in.Samples {
		if !reflect.DeepEqual(in.Samples[i].Layers, out.Samples[i].Layers) {
			t.Fatalf("sample %d (%d layers): decoded %+v, want %+v", i, depths[i], out.Samples[i].Layers, in.Samples[i].Layers)
		}
	}
	next := slices.Clone(out.Samples[2].Layers.Hits) // cut from the slab right after sample 0's
	l := out.Samples[0].Layers
	l.Hits = append(l.Hits, -1)
	l.PrefetchWasted = append(l.PrefetchWasted, -1)
	if !slices.Equal(out.Samples[2].Layers.Hits, next) || !slices.Equal(out.Samples[0].Layers.Misses, in.Samples[0].Layers.Misses) {
		t.Fatal("appending to one sample's counts changed another's")
	}
}
