package store

import (
	"context"
	"encoding/binary"
	"io"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lesfarm/lesfarm/protocol"
)

// copySamples COPYs the batches' samples into table (samples, or the
// samples_in staging table) on conn in PostgreSQL's binary COPY format,
// encoded here column by column, and returns the rows copied.
//
// pgx's CopyFrom plans and encodes every value through its type map
// (boxed in an any): in BenchmarkIngest that was a third of the ingest's
// CPU, more than decoding the messages. The columns' types are fixed, so
// this writes them directly.
func copySamples(ctx context.Context, conn *pgconn.PgConn, table string, batches []*protocol.TelemetryBatch) (int64, error) {
	tag, err := conn.CopyFrom(ctx, &sampleCopyReader{batches: batches},
		"COPY "+table+" ("+strings.Join(samplesInCols, ", ")+") FROM STDIN (FORMAT binary)")
	return tag.RowsAffected(), err
}

// copyChunk is how many bytes sampleCopyReader encodes ahead.
const copyChunk = 64 << 10

// sampleCopyReader streams batches' samples as binary COPY data
// (samplesInCols order), encoding about copyChunk bytes at a time, so a
// large transaction is never built in memory whole.
type sampleCopyReader struct {
	batches []*protocol.TelemetryBatch
	b, i    int // next sample: batches[b].Samples[i]
	buf     []byte
	off     int
	started bool
	done    bool
}

// copyHeader is the binary COPY signature, flags and header extension
// length.
var copyHeader = []byte("PGCOPY\n\xff\r\n\x00\x00\x00\x00\x00\x00\x00\x00\x00")

func (r *sampleCopyReader) Read(p []byte) (int, error) {
	for r.off == len(r.buf) {
		if r.done {
			return 0, io.EOF
		}
		r.fill()
	}
	n := copy(p, r.buf[r.off:])
	r.off += n
	return n, nil
}

func (r *sampleCopyReader) fill() {
	buf := r.buf[:0]
	r.off = 0
	if !r.started {
		buf = append(buf, copyHeader...)
		r.started = true
	}
	for len(buf) < copyChunk && r.b < len(r.batches) {
		bt := r.batches[r.b]
		if r.i >= len(bt.Samples) {
			r.b, r.i = r.b+1, 0
			continue
		}
		buf = appendSampleTuple(buf, bt, r.i)
		r.i++
	}
	if r.b >= len(r.batches) {
		buf = binary.BigEndian.AppendUint16(buf, 0xffff) // trailer: -1
		r.done = true
	}
	r.buf = buf
}

// appendSampleTuple appends sample i of bt as one binary COPY tuple: the
// field count, then each field's length and big-endian value (bigint 8,
// integer 4, smallint 2 bytes; layers as PackLayers bytes, or NULL).
func appendSampleTuple(buf []byte, bt *protocol.TelemetryBatch, i int) []byte {
	s := &bt.Samples[i]
	be := binary.BigEndian
	i2 := func(buf []byte, v int16) []byte { return be.AppendUint16(be.AppendUint32(buf, 2), uint16(v)) }
	i4 := func(buf []byte, v int32) []byte { return be.AppendUint32(be.AppendUint32(buf, 4), uint32(v)) }
	i8 := func(buf []byte, v int64) []byte { return be.AppendUint64(be.AppendUint32(buf, 8), uint64(v)) }
	buf = be.AppendUint16(buf, uint16(len(samplesInCols)))
	buf = i8(buf, bt.RunID)
	buf = i4(buf, int32(bt.Seq))
	buf = i2(buf, int16(i))
	buf = i2(buf, int16(s.ConfigIndex))
	buf = i2(buf, int16(s.Repetition))
	buf = i4(buf, int32(s.Step))
	buf = i2(buf, phaseCodes[s.Phase])
	buf = i4(buf, int32(s.Pos))
	buf = i4(buf, int32(s.Tokens))
	buf = i8(buf, s.DurationNS)
	buf = i8(buf, s.StallNS)
	buf = i8(buf, s.BytesRead)
	buf = i8(buf, s.CacheBytes)
	l := s.Layers
	if l == nil {
		for range 4 {
			buf = i4(buf, 0)
		}
		return be.AppendUint32(buf, 0xffffffff) // layers NULL
	}
	buf = i4(buf, sum32(l.Hits))
	buf = i4(buf, sum32(l.Misses))
	buf = i4(buf, sum32(l.PrefetchUsed))
	buf = i4(buf, sum32(l.PrefetchWasted))
	n := 2 * (len(l.Hits) + len(l.Misses) + len(l.PrefetchUsed) + len(l.PrefetchWasted))
	buf = be.AppendUint32(buf, uint32(n))
	_, buf = PackLayers(buf, l)
	return buf
}
