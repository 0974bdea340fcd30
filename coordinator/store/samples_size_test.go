package store

import (
	"testing"

	"github.com/lesfarm/lesfarm/protocol"
)

// TestBatchTupleSize checks that batchTupleSize is the exact length of
// appendBatchTuple's tuple, with per-layer detail, without it and empty.
func TestBatchTupleSize(t *testing.T) {
	l := &protocol.LayerCounts{Hits: []int32{1, 2, 3}, Misses: []int32{0, 1, 0}, PrefetchUsed: []int32{1, 1, 1}, PrefetchWasted: []int32{0, 0, 2}}
	empty := &protocol.LayerCounts{Hits: []int32{}, Misses: []int32{}, PrefetchUsed: []int32{}, PrefetchWasted: []int32{}}
	for _, ss := range [][]protocol.Sample{
		{{Phase: protocol.PhaseDecode}},
		{{Phase: protocol.PhaseDecode, Layers: l}},
		{{Phase: protocol.PhasePrefill, Layers: l}, {Phase: protocol.PhaseDecode}, {Phase: protocol.PhaseVerify, Layers: empty}},
	} {
		b := &protocol.TelemetryBatch{RunID: 1, Seq: 2, Samples: ss}
		if got, want := len(appendBatchTuple(nil, b)), batchTupleSize(b); got != want {
			t.Errorf("%d samples: tuple %d bytes, batchTupleSize %d", len(ss), got, want)
		}
	}
}
