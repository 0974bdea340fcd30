package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"slices"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lesfarm/lesfarm/protocol"
)

// sampleBatchCols are the columns of sample_batches (and its staging
// table), in COPY order (migration 00030).
var sampleBatchCols = []string{"run_id", "seq", "n", "config_index", "repetition", "step", "phase", "pos", "tokens",
	"duration_ns", "stall_ns", "bytes_read", "cache_bytes", "hits_total", "misses_total", "prefetch_used_total",
	"prefetch_wasted_total", "layers"}

// Element type OIDs of the binary array encoding.
const (
	oidBytea = 17
	oidInt8  = 20
	oidInt2  = 21
	oidInt4  = 23
)

// copyHeader is the binary COPY signature, flags and header extension
// length.
var copyHeader = []byte("PGCOPY\n\xff\r\n\x00\x00\x00\x00\x00\x00\x00\x00\x00")

// sampleCopy is the binary COPY data of telemetry batches, encoded before
// the transaction opens, one sample_batches tuple per batch: the backend
// then reads it at the speed of the socket instead of waiting on the
// coordinator's encoding mid-COPY, and a retried or deduplicating COPY
// reuses the bytes. buf is the COPY header followed by the tuples; batch
// k's tuple is buf[end[k-1]:end[k]] (end[-1] being the header's length).
type sampleCopy struct {
	buf []byte
	end []int
}

var sampleCopyPool = sync.Pool{New: func() any { return &sampleCopy{} }}

// encodeSampleCopy encodes every batch with samples into a pooled
// sampleCopy (release it with putSampleCopy).
func encodeSampleCopy(batches []*protocol.TelemetryBatch) *sampleCopy {
	c := sampleCopyPool.Get().(*sampleCopy)
	size := len(copyHeader) + 2
	for _, b := range batches {
		if len(b.Samples) > 0 {
			size += batchTupleSize(b)
		}
	}
	c.buf, c.end = slices.Grow(c.buf[:0], size), c.end[:0]
	c.buf = append(c.buf, copyHeader...)
	for _, b := range batches {
		if len(b.Samples) > 0 {
			c.buf = appendBatchTuple(c.buf, b)
		}
		c.end = append(c.end, len(c.buf))
	}
	return c
}

// putSampleCopy returns c to the pool unless it grew very large.
func putSampleCopy(c *sampleCopy) {
	if cap(c.buf) <= 16<<20 {
		sampleCopyPool.Put(c)
	}
}

// data returns the COPY stream of the batches whose indexes are keep
// (ascending; nil means all). The bytes are valid until the next call.
func (c *sampleCopy) data(keep []int) []byte {
	tuples := len(copyHeader)
	if len(c.end) > 0 {
		tuples = c.end[len(c.end)-1]
	}
	if keep == nil {
		c.buf = binary.BigEndian.AppendUint16(c.buf[:tuples], 0xffff) // trailer: -1
		return c.buf
	}
	out := make([]byte, 0, tuples+2)
	out = append(out, copyHeader...)
	for _, k := range keep {
		start := len(copyHeader)
		if k > 0 {
			start = c.end[k-1]
		}
		out = append(out, c.buf[start:c.end[k]]...)
	}
	return binary.BigEndian.AppendUint16(out, 0xffff)
}

// copySampleBatches COPYs data (from sampleCopy.data) into table
// (sample_batches, or its staging table) on conn in PostgreSQL's binary
// COPY format.
//
// pgx's CopyFrom plans and encodes every value through its type map
// (boxed in an any): in BenchmarkIngest that was a third of the ingest's
// CPU, more than decoding the messages. The columns' types are fixed, so
// the tuples are written directly.
func copySampleBatches(ctx context.Context, conn *pgconn.PgConn, table string, data []byte) error {
	_, err := conn.CopyFrom(ctx, bytes.NewReader(data),
		"COPY "+table+" ("+strings.Join(sampleBatchCols, ", ")+") FROM STDIN (FORMAT binary)")
	return err
}

// batchTupleSize is the length of bt's tuple (appendBatchTuple), so the
// buffer is allocated once at its size instead of doubling.
func batchTupleSize(bt *protocol.TelemetryBatch) int {
	n := len(bt.Samples)
	size := 2 + 12 + 8 + 6  // field count, run_id, seq, n
	size += 3 * (24 + 6*n)  // smallint[]: config_index, repetition, phase
	size += 7 * (24 + 8*n)  // integer[]: step, pos, tokens and the four totals
	size += 4 * (24 + 12*n) // bigint[]
	size += 24 + 4*n        // bytea[] header and element lengths
	for i := range bt.Samples {
		if l := bt.Samples[i].Layers; l != nil {
			size += 2 * (len(l.Hits) + len(l.Misses) + len(l.PrefetchUsed) + len(l.PrefetchWasted))
		}
	}
	return size
}

// appendArrayHeader appends the length word of a one-dimensional binary
// array field of n elements of elemSize bytes each and its header (no
// nulls, lower bound 1).
func appendArrayHeader(buf []byte, oid uint32, n, elemSize int) []byte {
	be := binary.BigEndian
	buf = be.AppendUint32(buf, uint32(20+n*(4+elemSize)))
	buf = be.AppendUint32(buf, 1) // ndim
	buf = be.AppendUint32(buf, 0) // no nulls
	buf = be.AppendUint32(buf, oid)
	buf = be.AppendUint32(buf, uint32(n))
	return be.AppendUint32(buf, 1) // lower bound
}

// appendBatchTuple appends bt as one binary COPY tuple of sample_batches:
// the field count, then each field's length and value (big-endian
// integers; arrays as 1-D arrays of their elements; layers as PackLayers
// bytes per sample, NULL where the agent dropped per-layer detail).
func appendBatchTuple(buf []byte, bt *protocol.TelemetryBatch) []byte {
	be := binary.BigEndian
	ss := bt.Samples
	n := len(ss)
	buf = be.AppendUint16(buf, uint16(len(sampleBatchCols)))
	buf = be.AppendUint64(be.AppendUint32(buf, 8), uint64(bt.RunID))
	buf = be.AppendUint32(be.AppendUint32(buf, 4), uint32(int32(bt.Seq)))
	buf = be.AppendUint16(be.AppendUint32(buf, 2), uint16(int16(n)))
	i2 := func(buf []byte, f func(*protocol.Sample) int16) []byte {
		buf = appendArrayHeader(buf, oidInt2, n, 2)
		for i := range ss {
			buf = be.AppendUint16(be.AppendUint32(buf, 2), uint16(f(&ss[i])))
		}
		return buf
	}
	i4 := func(buf []byte, f func(*protocol.Sample) int32) []byte {
		buf = appendArrayHeader(buf, oidInt4, n, 4)
		for i := range ss {
			buf = be.AppendUint32(be.AppendUint32(buf, 4), uint32(f(&ss[i])))
		}
		return buf
	}
	i8 := func(buf []byte, f func(*protocol.Sample) int64) []byte {
		buf = appendArrayHeader(buf, oidInt8, n, 8)
		for i := range ss {
			buf = be.AppendUint64(be.AppendUint32(buf, 8), uint64(f(&ss[i])))
		}
		return buf
	}
	total := func(pick func(*protocol.LayerCounts) []int32) func(*protocol.Sample) int32 {
		return func(s *protocol.Sample) int32 {
			if s.Layers == nil {
				return 0
			}
			return sum32(pick(s.Layers))
		}
	}
	buf = i2(buf, func(s *protocol.Sample) int16 { return int16(s.ConfigIndex) })
	buf = i2(buf, func(s *protocol.Sample) int16 { return int16(s.Repetition) })
	buf = i4(buf, func(s *protocol.Sample) int32 { return int32(s.Step) })
	buf = i2(buf, func(s *protocol.Sample) int16 { return phaseCodes[s.Phase] })
	buf = i4(buf, func(s *protocol.Sample) int32 { return int32(s.Pos) })
	buf = i4(buf, func(s *protocol.Sample) int32 { return int32(s.Tokens) })
	buf = i8(buf, func(s *protocol.Sample) int64 { return s.DurationNS })
	buf = i8(buf, func(s *protocol.Sample) int64 { return s.StallNS })
	buf = i8(buf, func(s *protocol.Sample) int64 { return s.BytesRead })
	buf = i8(buf, func(s *protocol.Sample) int64 { return s.CacheBytes })
	buf = i4(buf, total(func(l *protocol.LayerCounts) []int32 { return l.Hits }))
	buf = i4(buf, total(func(l *protocol.LayerCounts) []int32 { return l.Misses }))
	buf = i4(buf, total(func(l *protocol.LayerCounts) []int32 { return l.PrefetchUsed }))
	buf = i4(buf, total(func(l *protocol.LayerCounts) []int32 { return l.PrefetchWasted }))
	return appendLayersArray(buf, ss)
}

// appendLayersArray appends the layers bytea[] field of ss: each sample's
// PackLayers bytes, or NULL.
func appendLayersArray(buf []byte, ss []protocol.Sample) []byte {
	be := binary.BigEndian
	lenAt := len(buf)
	buf = be.AppendUint32(buf, 0) // field length, patched below
	hasNull := uint32(0)
	for i := range ss {
		if ss[i].Layers == nil {
			hasNull = 1
			break
		}
	}
	buf = be.AppendUint32(buf, 1) // ndim
	buf = be.AppendUint32(buf, hasNull)
	buf = be.AppendUint32(buf, oidBytea)
	buf = be.AppendUint32(buf, uint32(len(ss)))
	buf = be.AppendUint32(buf, 1) // lower bound
	for i := range ss {
		l := ss[i].Layers
		if l == nil {
			buf = be.AppendUint32(buf, 0xffffffff) // NULL
			continue
		}
		n := 2 * (len(l.Hits) + len(l.Misses) + len(l.PrefetchUsed) + len(l.PrefetchWasted))
		buf = be.AppendUint32(buf, uint32(n))
		_, buf = PackLayers(buf, l)
	}
	be.PutUint32(buf[lenAt:], uint32(len(buf)-lenAt-4))
	return buf
}
