package protocol

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// SamplesEncoding names the wire encoding of TelemetryBatch samples.
const SamplesEncoding = "varint-rows-v1"

// samplesWire is the wire form of TelemetryBatch.Samples. JSON number
// arrays decode at only about 100k samples/s per core with encoding/json,
// which would make decoding the ingest bottleneck, so samples travel as one
// base64 blob of unsigned/zig-zag varints, row by row:
//
//	cfg rep* step phase pos tokens dur_ns stall_ns bytes_read cache_bytes L
//	then L values each of hit, miss, pf_used, pf_wasted
//
// (* zig-zag signed; phase is 1 prefill, 2 decode, 3 verify as in
// runtime/trace; L is 0 when per-layer detail is absent).
type samplesWire struct {
	N    int    `json:"n"`
	Enc  string `json:"enc"`
	Data []byte `json:"data"`
}

// telemetryWire is TelemetryBatch as it is marshalled.
type telemetryWire struct {
	V        int          `json:"v"`
	RunID    int64        `json:"run_id"`
	Token    int64        `json:"token"`
	DeviceID string       `json:"device_id"`
	Seq      uint64       `json:"seq"`
	Samples  *samplesWire `json:"samples"`
	Dropped  uint64       `json:"dropped,omitempty"`
	Progress *Progress    `json:"progress,omitempty"`
	Experts  *expertsWire `json:"experts,omitempty"`
	SentAt   time.Time    `json:"sent_at"`
}

var phaseCode = map[string]uint64{PhasePrefill: 1, PhaseDecode: 2, PhaseVerify: 3}
var phaseName = [...]string{1: PhasePrefill, 2: PhaseDecode, 3: PhaseVerify}

// MarshalJSON implements json.Marshaler.
func (m *TelemetryBatch) MarshalJSON() ([]byte, error) {
	buf := make([]byte, 0, len(m.Samples)*24)
	for i := range m.Samples {
		s := &m.Samples[i]
		buf = binary.AppendUvarint(buf, uint64(s.ConfigIndex))
		buf = binary.AppendVarint(buf, int64(s.Repetition))
		buf = binary.AppendUvarint(buf, uint64(s.Step))
		buf = binary.AppendUvarint(buf, phaseCode[s.Phase])
		buf = binary.AppendUvarint(buf, uint64(s.Pos))
		buf = binary.AppendUvarint(buf, uint64(s.Tokens))
		buf = binary.AppendVarint(buf, s.DurationNS)
		buf = binary.AppendVarint(buf, s.StallNS)
		buf = binary.AppendVarint(buf, s.BytesRead)
		buf = binary.AppendVarint(buf, s.CacheBytes)
		l := s.Layers
		if l == nil {
			buf = binary.AppendUvarint(buf, 0)
			continue
		}
		if len(l.Misses) != len(l.Hits) || len(l.PrefetchUsed) != len(l.Hits) || len(l.PrefetchWasted) != len(l.Hits) {
			return nil, fmt.Errorf("samples[%d].layers: hit, miss, pf_used and pf_wasted must have the same length", i)
		}
		buf = binary.AppendUvarint(buf, uint64(len(l.Hits)))
		for _, arr := range [][]int32{l.Hits, l.Misses, l.PrefetchUsed, l.PrefetchWasted} {
			for _, v := range arr {
				buf = binary.AppendVarint(buf, int64(v))
			}
		}
	}
	ew, err := marshalExperts(m.Experts)
	if err != nil {
		return nil, err
	}
	return json.Marshal(&telemetryWire{V: m.V, RunID: m.RunID, Token: m.Token, DeviceID: m.DeviceID, Seq: m.Seq,
		Samples: &samplesWire{N: len(m.Samples), Enc: SamplesEncoding, Data: buf}, Dropped: m.Dropped, Progress: m.Progress,
		Experts: ew, SentAt: m.SentAt})
}

// varintReader reads varints from a byte slice, remembering the first error.
type varintReader struct {
	b   []byte
	err error
	// what names the blob in errors ("" means samples.data).
	what string
}

func (r *varintReader) name() string {
	if r.what == "" {
		return "samples.data"
	}
	return r.what
}

func (r *varintReader) u() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = errors.New(r.name() + ": truncated or overlong varint")
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *varintReader) s() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.err = errors.New(r.name() + ": truncated or overlong varint")
		return 0
	}
	r.b = r.b[n:]
	return v
}

// small returns r.u() when it fits in [0, limit], and records an error
// otherwise.
func (r *varintReader) small(field string, limit uint64) int {
	v := r.u()
	if v > limit && r.err == nil {
		r.err = fmt.Errorf("%s: %s %d out of range [0, %d]", r.name(), field, v, limit)
	}
	return int(min(v, limit))
}

func (r *varintReader) i32(field string) int32 {
	v := r.s()
	if (v < -1<<31 || v >= 1<<31) && r.err == nil {
		r.err = fmt.Errorf("%s: %s %d out of int32 range", r.name(), field, v)
	}
	return int32(v)
}

// layerCounts reads len(arr) zig-zag varint layer counts into arr. Counts
// are small (a layer's hits or misses in one step), so nearly all are one
// byte; those are decoded inline and the rest go through i32 (the same
// values and errors, about a quarter of the coordinator's decode CPU at
// 48 layers).
func (r *varintReader) layerCounts(arr []int32) {
	for j := range arr {
		if r.err == nil && len(r.b) > 0 && r.b[0] < 0x80 {
			x := int32(r.b[0])
			arr[j] = x>>1 ^ -(x & 1)
			r.b = r.b[1:]
			continue
		}
		arr[j] = r.i32("layer count")
	}
}

// UnmarshalJSON implements json.Unmarshaler. It checks the encoding's shape;
// Validate checks the values.
func (m *TelemetryBatch) UnmarshalJSON(data []byte) error { return m.unmarshalJSON(data) }

// unmarshalJSON is UnmarshalJSON, which DecodeTelemetry calls directly. A
// message of exactly the shape agents send is read by scanTelemetry,
// which gives the same wire form as encoding/json with one pass over the
// bytes; anything else (or anything it is unsure of) goes through
// json.Unmarshal.
func (m *TelemetryBatch) unmarshalJSON(data []byte) error {
	var w telemetryWire
	if !scanTelemetry(data, &w) {
		w = telemetryWire{}
		if err := json.Unmarshal(data, &w); err != nil {
			return err
		}
	}
	return m.fromWire(&w)
}

// fromWire fills m from its decoded wire form.
func (m *TelemetryBatch) fromWire(w *telemetryWire) error {
	*m = TelemetryBatch{V: w.V, RunID: w.RunID, Token: w.Token, DeviceID: w.DeviceID, Seq: w.Seq,
		Dropped: w.Dropped, Progress: w.Progress, SentAt: w.SentAt}
	experts, err := unmarshalExperts(w.Experts)
	if err != nil {
		return err
	}
	m.Experts = experts
	sw := w.Samples
	if sw == nil {
		return nil
	}
	if sw.Enc != SamplesEncoding {
		return fmt.Errorf("samples.enc %q unsupported (want %s)", clip(sw.Enc), SamplesEncoding)
	}
	if sw.N < 0 || sw.N > MaxSamplesPerBatch || sw.N > len(sw.Data) {
		return fmt.Errorf("samples.n %d out of range", sw.N)
	}
	r := varintReader{b: sw.Data}
	m.Samples = make([]Sample, sw.N)
	// The samples' layer counts are cut from two slabs instead of two
	// allocations per sample (at 48 layers those were most of the
	// coordinator's allocations, and its GC): lcs holds the LayerCounts,
	// counts the arrays, sized for the rest of the batch at this sample's
	// depth but never more than one count per remaining byte.
	var lcs []LayerCounts
	var counts []int32
	const big = 1 << 40
	for i := range m.Samples {
		s := &m.Samples[i]
		s.ConfigIndex = r.small("cfg", 1<<20)
		s.Repetition = int(r.i32("rep"))
		s.Step = r.small("step", big)
		if p := r.u(); p >= 1 && p <= 3 {
			s.Phase = phaseName[p]
		}
		s.Pos = r.small("pos", big)
		s.Tokens = r.small("tokens", big)
		s.DurationNS, s.StallNS, s.BytesRead, s.CacheBytes = r.s(), r.s(), r.s(), r.s()
		l := r.small("layers", MaxLayers)
		if l > 0 {
			if r.err == nil && len(r.b) < 4*l {
				r.err = errors.New("samples.data: truncated layer counts")
			}
			if r.err != nil {
				break
			}
			if len(counts) < 4*l {
				counts = make([]int32, max(4*l, min(4*l*(sw.N-i), len(r.b))))
			}
			arr := counts[: 4*l : 4*l]
			counts = counts[4*l:]
			r.layerCounts(arr)
			if len(lcs) == 0 {
				lcs = make([]LayerCounts, sw.N-i)
			}
			s.Layers = &lcs[0]
			lcs = lcs[1:]
			*s.Layers = LayerCounts{Hits: arr[:l:l], Misses: arr[l : 2*l : 2*l], PrefetchUsed: arr[2*l : 3*l : 3*l], PrefetchWasted: arr[3*l:]}
		}
		if r.err != nil {
			break
		}
	}
	if r.err != nil {
		return r.err
	}
	if len(r.b) != 0 {
		return fmt.Errorf("samples.data: %d bytes after sample %d", len(r.b), sw.N)
	}
	return nil
}
