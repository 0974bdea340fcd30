package telemetry

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// Record is one message waiting to be published: a telemetry batch (detail)
// or a summary (a run's result, or a batch that must not be lost).
type Record struct {
	Subject string
	// MsgID is the JetStream de-duplication id (Nats-Msg-Id), e.g.
	// "t/<device>/<run>/<token>/<seq>/<nonce>" (protocol/msgid.go), so a
	// record published twice is stored once.
	MsgID string
	Data  []byte
	// Summary records are never dropped; detail records are dropped oldest
	// first when the buffer is full.
	Summary bool
	// Resend marks a record that may have been published before this
	// process handed it to the Outbox (a result replayed after a restart):
	// a duplicate ack then means its own earlier copy was stored. It is
	// not stored in the Buffer, whose records all count as re-sends.
	Resend bool
}

// Buffer is a bounded, crash-safe FIFO of records on disk: one file per
// record, written to a temporary name and renamed, so a crash leaves whole
// records or none. When appending would exceed MaxBytes, the oldest detail
// records are dropped (and counted per subject); summary records are never
// dropped, so a buffer holding only summaries may exceed its bound.
//
// Buffer is safe for concurrent use.
type Buffer struct {
	dir      string
	maxBytes int64

	mu      sync.Mutex
	recs    []bufEntry // oldest first
	bytes   int64
	next    uint64
	dropped map[string]uint64 // detail records dropped, by subject
	total   uint64
}

type bufEntry struct {
	id      uint64
	summary bool
	size    int64
}

// ErrEmpty is returned by Peek on an empty buffer.
var ErrEmpty = errors.New("telemetry buffer: empty")

// OpenBuffer opens (or creates) a buffer in dir holding at most maxBytes of
// records (maxBytes <= 0 means 64 MiB). Records left by a previous process
// are kept in order; unreadable or torn ones are removed and counted as
// dropped.
func OpenBuffer(dir string, maxBytes int64) (*Buffer, error) {
	if maxBytes <= 0 {
		maxBytes = 64 << 20
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("telemetry buffer: %w", err)
	}
	b := &Buffer{dir: dir, maxBytes: maxBytes, dropped: map[string]uint64{}}
	if data, err := os.ReadFile(filepath.Join(dir, "dropped.json")); err == nil {
		_ = json.Unmarshal(data, &b.dropped)
		if b.dropped == nil {
			b.dropped = map[string]uint64{}
		}
		for _, n := range b.dropped {
			b.total += n
		}
	}
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("telemetry buffer: %w", err)
	}
	for _, de := range des {
		name := de.Name()
		if strings.HasSuffix(name, ".tmp") {
			_ = os.Remove(filepath.Join(dir, name))
			continue
		}
		base, kind, ok := strings.Cut(name, ".")
		if !ok || (kind != "d" && kind != "s") {
			continue
		}
		id, err := strconv.ParseUint(base, 10, 64)
		if err != nil {
			continue
		}
		info, err := de.Info()
		if err != nil {
			continue
		}
		b.recs = append(b.recs, bufEntry{id: id, summary: kind == "s", size: info.Size()})
		b.bytes += info.Size()
		if id >= b.next {
			b.next = id + 1
		}
	}
	sort.Slice(b.recs, func(i, j int) bool { return b.recs[i].id < b.recs[j].id })
	return b, nil
}

func (b *Buffer) path(e bufEntry) string {
	k := "d"
	if e.summary {
		k = "s"
	}
	return filepath.Join(b.dir, fmt.Sprintf("%020d.%s", e.id, k))
}

// encode lays a record out as: u32 subject len, subject, u32 msgid len,
// msgid, data, u32 crc32 of everything before.
func encode(r Record) []byte {
	out := make([]byte, 0, 12+len(r.Subject)+len(r.MsgID)+len(r.Data))
	out = binary.LittleEndian.AppendUint32(out, uint32(len(r.Subject)))
	out = append(out, r.Subject...)
	out = binary.LittleEndian.AppendUint32(out, uint32(len(r.MsgID)))
	out = append(out, r.MsgID...)
	out = append(out, r.Data...)
	return binary.LittleEndian.AppendUint32(out, crc32.ChecksumIEEE(out))
}

func decode(b []byte, summary bool) (Record, error) {
	bad := errors.New("telemetry buffer: corrupt record")
	if len(b) < 12 {
		return Record{}, bad
	}
	body, sum := b[:len(b)-4], binary.LittleEndian.Uint32(b[len(b)-4:])
	if crc32.ChecksumIEEE(body) != sum {
		return Record{}, bad
	}
	n := int(binary.LittleEndian.Uint32(body))
	body = body[4:]
	if n < 0 || n > len(body)-4 {
		return Record{}, bad
	}
	r := Record{Subject: string(body[:n]), Summary: summary}
	body = body[n:]
	m := int(binary.LittleEndian.Uint32(body))
	body = body[4:]
	if m < 0 || m > len(body) {
		return Record{}, bad
	}
	r.MsgID = string(body[:m])
	r.Data = append([]byte(nil), body[m:]...)
	return r, nil
}

// Append adds r at the tail. Making room drops the oldest detail records;
// a detail record that cannot fit even then is itself dropped (counted) and
// Append returns nil. Only I/O errors are returned.
func (b *Buffer) Append(r Record) error {
	data := encode(r)
	size := int64(len(data))
	b.mu.Lock()
	defer b.mu.Unlock()
	for b.bytes+size > b.maxBytes {
		i := b.oldestDetailLocked()
		if i < 0 {
			break
		}
		b.dropLocked(i)
	}
	if !r.Summary && b.bytes+size > b.maxBytes {
		b.countDropLocked(r.Subject)
		return nil
	}
	e := bufEntry{id: b.next, summary: r.Summary, size: size}
	p := b.path(e)
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return fmt.Errorf("telemetry buffer: %w", err)
	}
	if err := os.Rename(tmp, p); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("telemetry buffer: %w", err)
	}
	b.next++
	b.recs = append(b.recs, e)
	b.bytes += size
	return nil
}

func (b *Buffer) oldestDetailLocked() int {
	for i, e := range b.recs {
		if !e.summary {
			return i
		}
	}
	return -1
}

// dropLocked removes record i as a dropped detail record.
func (b *Buffer) dropLocked(i int) {
	e := b.recs[i]
	subject := ""
	if data, err := os.ReadFile(b.path(e)); err == nil {
		if r, err := decode(data, e.summary); err == nil {
			subject = r.Subject
		}
	}
	_ = os.Remove(b.path(e))
	b.recs = append(b.recs[:i], b.recs[i+1:]...)
	b.bytes -= e.size
	b.countDropLocked(subject)
}

func (b *Buffer) countDropLocked(subject string) {
	b.dropped[subject]++
	b.total++
	if data, err := json.Marshal(b.dropped); err == nil {
		tmp := filepath.Join(b.dir, "dropped.json.tmp")
		if os.WriteFile(tmp, data, 0o644) == nil {
			_ = os.Rename(tmp, filepath.Join(b.dir, "dropped.json"))
		}
	}
}

// Peek returns the oldest record and a token for Remove. A record that
// cannot be read back (corrupt) is removed, counted as dropped, and the
// next one is returned. It returns ErrEmpty when the buffer is empty.
func (b *Buffer) Peek() (Record, uint64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for len(b.recs) > 0 {
		e := b.recs[0]
		data, err := os.ReadFile(b.path(e))
		if err == nil {
			if r, err := decode(data, e.summary); err == nil {
				return r, e.id, nil
			}
		}
		_ = os.Remove(b.path(e))
		b.recs = b.recs[1:]
		b.bytes -= e.size
		b.countDropLocked("")
	}
	return Record{}, 0, ErrEmpty
}

// Remove deletes the record Peek returned (after it was published). It is
// a no-op when the record is gone already (e.g. dropped meanwhile).
func (b *Buffer) Remove(id uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, e := range b.recs {
		if e.id == id {
			_ = os.Remove(b.path(e))
			b.recs = append(b.recs[:i], b.recs[i+1:]...)
			b.bytes -= e.size
			return
		}
	}
}

// Len returns the number of buffered records.
func (b *Buffer) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.recs)
}

// Bytes returns the size of the buffered records on disk.
func (b *Buffer) Bytes() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.bytes
}

// Dropped returns how many detail records were dropped in total, and per
// subject ("" for records lost to corruption), since the buffer directory
// was created.
func (b *Buffer) Dropped() (total uint64, bySubject map[string]uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	m := make(map[string]uint64, len(b.dropped))
	for k, v := range b.dropped {
		m[k] = v
	}
	return b.total, m
}
