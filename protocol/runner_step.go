package protocol

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
)

// RunnerLayersEncoding names the wire encoding of RunnerLayers.
const RunnerLayersEncoding = "varint-layers-v1"

// runnerLayersWire is RunnerLayers as it travels: a step's layer events
// are its line's bulk, and JSON number arrays cost encoding/json about
// 150 ns a number to decode, so they travel as one base64 blob of
// unsigned varints, event by event:
//
//	layer hits misses pf_used pf_wasted stall_ns compute_ns
//	n_sel sel... n_miss miss... n_pred pred...
type runnerLayersWire struct {
	N    int    `json:"n"`
	Enc  string `json:"enc"`
	Data []byte `json:"data"`
}

// appendLayers appends the varint rows of l to buf.
func appendLayers(buf []byte, l *RunnerLayers) []byte {
	for i, layer := range l.Layer {
		for _, v := range [...]int{layer, at(l.Hits, i), at(l.Misses, i), at(l.PrefetchUsed, i), at(l.PrefetchWasted, i)} {
			buf = binary.AppendUvarint(buf, uint64(max(v, 0)))
		}
		buf = binary.AppendUvarint(buf, uint64(max(at(l.StallNS, i), 0)))
		buf = binary.AppendUvarint(buf, uint64(max(at(l.ComputeNS, i), 0)))
		for _, ids := range [...][]int{at(l.Selected, i), at(l.Missed, i), at(l.Predicted, i)} {
			buf = binary.AppendUvarint(buf, uint64(len(ids)))
			for _, e := range ids {
				buf = binary.AppendUvarint(buf, uint64(max(e, 0)))
			}
		}
	}
	return buf
}

// at is col[i], or the zero value for a column left empty.
func at[T any](col []T, i int) T {
	var zero T
	if i < len(col) {
		return col[i]
	}
	return zero
}

// MarshalJSON implements json.Marshaler.
func (l *RunnerLayers) MarshalJSON() ([]byte, error) {
	return json.Marshal(&runnerLayersWire{N: len(l.Layer), Enc: RunnerLayersEncoding, Data: appendLayers(nil, l)})
}

// UnmarshalJSON implements json.Unmarshaler. Every column of the result
// has one entry per event; the expert lists are cut from one slab.
func (l *RunnerLayers) UnmarshalJSON(data []byte) error {
	var w runnerLayersWire
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	return l.decode(&w)
}

// decode fills l from w, checking every bound as it reads. The columns
// are cut from three slabs (counts, durations, expert ids), reused from
// l's previous contents where they are large enough.
func (l *RunnerLayers) decode(w *runnerLayersWire) error {
	if w.Enc != RunnerLayersEncoding {
		return fmt.Errorf("step.l.enc %q unsupported (want %s)", clip(w.Enc), RunnerLayersEncoding)
	}
	n := w.N
	if n < 1 || n > MaxRunnerLayerEvents || n > len(w.Data)/10 { // an event takes at least 10 bytes
		return fmt.Errorf("step.l.n %d out of range for %d bytes of data (1 to %d events)", n, len(w.Data), MaxRunnerLayerEvents)
	}
	r := layerReader{b: w.Data}
	ints, durs := resize(l.slabInts, 5*n), resize(l.slabDurs, 2*n)
	// The data holds at most one expert id a byte after each event's
	// seven figures and three counts.
	ids := resize(l.slabIDs, len(w.Data)-10*n)[:0]
	sel, miss, pred := resize(l.Selected, n), resize(l.Missed, n), resize(l.Predicted, n)
	*l = RunnerLayers{Layer: ints[:n:n], Hits: ints[n : 2*n : 2*n], Misses: ints[2*n : 3*n : 3*n], PrefetchUsed: ints[3*n : 4*n : 4*n], PrefetchWasted: ints[4*n:],
		StallNS: durs[:n:n], ComputeNS: durs[n:], Selected: sel, Missed: miss, Predicted: pred, slabInts: ints, slabDurs: durs}
	for i := range n {
		l.Layer[i] = r.int("layer", MaxLayers-1)
		l.Hits[i] = r.int("hits", MaxExpertsPerLayer)
		l.Misses[i] = r.int("misses", MaxExpertsPerLayer)
		l.PrefetchUsed[i] = r.int("pf_used", MaxExpertsPerLayer)
		l.PrefetchWasted[i] = r.int("pf_wasted", MaxExpertsPerLayer)
		l.StallNS[i] = int64(r.bounded("stall_ns", math.MaxInt64))
		l.ComputeNS[i] = int64(r.bounded("compute_ns", math.MaxInt64))
		for _, col := range [...][][]int{l.Selected, l.Missed, l.Predicted} {
			k := r.int("experts count", MaxExpertsPerLayer)
			if len(ids)+k > cap(ids) {
				r.fail(errors.New("step.l.data: truncated"))
				break
			}
			start := len(ids)
			for range k {
				ids = append(ids, r.int("expert", MaxExpertsPerLayer-1))
			}
			col[i] = ids[start:len(ids):len(ids)]
		}
		if r.err != nil {
			return r.err
		}
	}
	if len(r.b) != 0 {
		return fmt.Errorf("step.l.data: %d bytes after %d events", len(r.b), n)
	}
	l.slabIDs = ids
	return nil
}

// layerReader reads the unsigned varints of a layers blob, most of which
// are one byte (read inline), remembering the first error.
type layerReader struct {
	b   []byte
	err error
}

// int reads a varint in [0, limit].
func (r *layerReader) int(field string, limit int) int {
	if len(r.b) > 0 && r.b[0] < 0x80 && int(r.b[0]) <= limit {
		v := int(r.b[0])
		r.b = r.b[1:]
		return v
	}
	return int(r.bounded(field, uint64(limit)))
}

// bounded reads a varint in [0, limit] of any length.
func (r *layerReader) bounded(field string, limit uint64) uint64 {
	v, n := binary.Uvarint(r.b)
	switch {
	case n <= 0:
		r.fail(errors.New("step.l.data: truncated or overlong varint"))
		return 0
	case v > limit:
		r.fail(fmt.Errorf("step.l.data: %s %d out of range [0, %d]", field, v, limit))
		return 0
	}
	r.b = r.b[n:]
	return v
}

// fail records err when it is the first, and stops the reading.
func (r *layerReader) fail(err error) {
	if r.err == nil {
		r.err = err
	}
	r.b = nil
}

// resize returns s with length n, reusing its array when it is large
// enough (the contents are then stale).
func resize[T any](s []T, n int) []T {
	if cap(s) >= n {
		return s[:n]
	}
	return make([]T, n)
}

// AppendRunnerStepLine appends the step line of s to dst, without its
// newline: the bytes json.Marshal gives for RunnerLine{T: RunnerStep,
// Step: s}, written without reflection (the runner writes one line per
// forward step).
func AppendRunnerStepLine(dst []byte, s *RunnerStepData) []byte {
	switch s.Phase {
	case PhasePrefill, PhaseDecode, PhaseVerify:
	default: // not a phase the protocol knows: let encoding/json escape it
		b, _ := json.Marshal(&RunnerLine{T: RunnerStep, Step: s})
		return append(dst, b...)
	}
	dst = append(dst, `{"t":"step","step":{"s":`...)
	dst = strconv.AppendInt(dst, int64(s.Step), 10)
	dst = append(dst, `,"ph":"`...)
	dst = append(dst, s.Phase...)
	dst = append(dst, `","p":`...)
	dst = strconv.AppendInt(dst, int64(s.Pos), 10)
	dst = append(dst, `,"n":`...)
	dst = strconv.AppendInt(dst, int64(s.Tokens), 10)
	dst = append(dst, `,"d":`...)
	dst = strconv.AppendInt(dst, s.DurationNS, 10)
	for _, f := range [...]struct {
		key string
		v   int64
	}{{`,"st":`, s.StallNS}, {`,"b":`, s.BytesRead}, {`,"c":`, s.CacheBytes}} {
		if f.v != 0 {
			dst = append(dst, f.key...)
			dst = strconv.AppendInt(dst, f.v, 10)
		}
	}
	if l := s.Layers; l != nil {
		dst = append(dst, `,"l":{"n":`...)
		dst = strconv.AppendInt(dst, int64(len(l.Layer)), 10)
		dst = append(dst, `,"enc":"`+RunnerLayersEncoding+`","data":"`...)
		// The varints go at the end of dst, then base64 in front of them.
		raw := len(dst)
		dst = appendLayers(dst, l)
		n := len(dst) - raw
		enc := base64.StdEncoding.EncodedLen(n)
		dst = append(dst, make([]byte, enc)...)
		copy(dst[raw+enc:], dst[raw:raw+n])
		base64.StdEncoding.Encode(dst[raw:raw+enc], dst[raw+enc:raw+enc+n])
		dst = append(dst[:raw+enc], `"}`...)
	}
	return append(dst, "}}"...)
}

// scanRunnerStep reads a step line in one pass when it is exactly what
// AppendRunnerStepLine writes (keys among s, ph, p, n, d, st, b, c and l,
// each once, plain integers, strings without escapes). It reports false
// on anything else, and ParseRunnerLine then runs encoding/json: l then
// holds what encoding/json would have decoded whenever this returns true
// (FuzzRunnerLine compares them).
func scanRunnerStep(data []byte, l *RunnerLine) bool {
	if !bytes.HasPrefix(data, []byte(`{"t":"step","step":`)) {
		return false
	}
	s := scanner{b: data, i: len(`{"t":"step","step":`)}
	// The previous line's step and layers are reused (ParseRunnerLine).
	st := l.Step
	if st == nil {
		st = &RunnerStepData{}
	}
	layers := st.Layers
	*st = RunnerStepData{}
	var seen uint16
	ok := s.object(func(key []byte) bool {
		var bit uint16
		var good bool
		switch string(key) {
		case "s":
			bit, good = 1<<0, s.int(&st.Step)
		case "ph":
			v := s.str()
			bit, good = 1<<1, v != nil
			switch string(v) { // no allocation for the phases
			case PhasePrefill:
				st.Phase = PhasePrefill
			case PhaseDecode:
				st.Phase = PhaseDecode
			case PhaseVerify:
				st.Phase = PhaseVerify
			default:
				st.Phase = string(v)
			}
		case "p":
			bit, good = 1<<2, s.int(&st.Pos)
		case "n":
			bit, good = 1<<3, s.int(&st.Tokens)
		case "d":
			bit, good = 1<<4, s.int64(&st.DurationNS)
		case "st":
			bit, good = 1<<5, s.int64(&st.StallNS)
		case "b":
			bit, good = 1<<6, s.int64(&st.BytesRead)
		case "c":
			bit, good = 1<<7, s.int64(&st.CacheBytes)
		case "l":
			var w runnerLayersWire
			bit, good = 1<<8, s.blob(&w.N, &w.Enc, &w.Data)
			if good {
				if layers == nil {
					layers = &RunnerLayers{}
				}
				st.Layers = layers
				good = layers.decode(&w) == nil
			}
		default:
			return false
		}
		if !good || seen&bit != 0 {
			return false
		}
		seen |= bit
		return true
	})
	if !ok || !s.byte('}') {
		return false
	}
	s.ws()
	if s.i != len(data) {
		return false
	}
	*l = RunnerLine{T: RunnerStep, Step: st}
	return true
}
