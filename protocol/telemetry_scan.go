package protocol

import (
	"encoding/base64"
	"strconv"
)

// scanTelemetry reads a TelemetryBatch's wire form in one pass when data
// is exactly what agents send: one object whose keys are among v, run_id,
// token, device_id, seq, samples and experts (n, enc, data), progress
// (phase, done, total, message), dropped and sent_at, each once and
// spelled exactly, with plain integers, printable-ASCII strings without
// escapes and standard base64. It reports false on anything else (null,
// an unknown key, an escape, a fraction, a
// duplicate or differently cased key, trailing bytes, ...), and the
// caller then runs json.Unmarshal: w then holds what encoding/json would
// have decoded whenever this returns true (FuzzTelemetryScan compares
// them). encoding/json validates the whole message before decoding it,
// a second full pass, which was most of the coordinator's decode time.
func scanTelemetry(data []byte, w *telemetryWire) bool {
	s := scanner{b: data}
	var seen uint16
	ok := s.object(func(key []byte) bool {
		var bit uint16
		var good bool
		switch string(key) {
		case "v":
			bit, good = 1<<0, s.int(&w.V)
		case "run_id":
			bit, good = 1<<1, s.int64(&w.RunID)
		case "token":
			bit, good = 1<<2, s.int64(&w.Token)
		case "device_id":
			var v []byte
			bit, v = 1<<3, s.str()
			good, w.DeviceID = v != nil, string(v)
		case "seq":
			bit, good = 1<<4, s.uint64(&w.Seq)
		case "dropped":
			bit, good = 1<<5, s.uint64(&w.Dropped)
		case "samples":
			w.Samples = &samplesWire{}
			bit, good = 1<<6, s.blob(&w.Samples.N, &w.Samples.Enc, &w.Samples.Data)
		case "experts":
			w.Experts = &expertsWire{}
			bit, good = 1<<8, s.blob(&w.Experts.N, &w.Experts.Enc, &w.Experts.Data)
		case "progress":
			w.Progress = &Progress{}
			bit, good = 1<<9, s.progress(w.Progress)
		case "sent_at":
			s.ws()
			start := s.i
			bit, good = 1<<7, s.str() != nil
			// The same parser encoding/json calls, on the quoted string.
			good = good && w.SentAt.UnmarshalJSON(data[start:s.i]) == nil
		default:
			return false
		}
		if !good || seen&bit != 0 {
			return false
		}
		seen |= bit
		return true
	})
	s.ws()
	return ok && s.i == len(data)
}

// scanner is a cursor over JSON bytes for scanTelemetry; every method
// reports false (or nil) on what it does not handle.
type scanner struct {
	b []byte
	i int
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *scanner) byte(c byte) bool {
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// object reads {"key": value, ...}, calling field for each key with the
// cursor before its value.
func (s *scanner) object(field func(key []byte) bool) bool {
	if !s.byte('{') {
		return false
	}
	if s.byte('}') {
		return true
	}
	for {
		key := s.str()
		if key == nil || !s.byte(':') || !field(key) {
			return false
		}
		if s.byte(',') {
			continue
		}
		return s.byte('}')
	}
}

// str reads a string of printable ASCII without escapes and returns its
// bytes (nil otherwise; an empty string is a non-nil empty slice).
func (s *scanner) str() []byte {
	if !s.byte('"') {
		return nil
	}
	start := s.i
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			return s.b[start : s.i-1 : s.i-1]
		case c < 0x20 || c >= 0x7f || c == '\\':
			return nil
		}
		s.i++
	}
	return nil
}

// digits reads a JSON integer (-?(0|[1-9][0-9]*), no fraction or
// exponent) and returns its text.
func (s *scanner) digits(signed bool) []byte {
	s.ws()
	start := s.i
	if signed && s.i < len(s.b) && s.b[s.i] == '-' {
		s.i++
	}
	d := s.i
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
	}
	switch {
	case s.i == d, s.b[d] == '0' && s.i > d+1:
		return nil
	case s.i < len(s.b) && (s.b[s.i] == '.' || s.b[s.i] == 'e' || s.b[s.i] == 'E'):
		return nil
	}
	return s.b[start:s.i]
}

func (s *scanner) int64(v *int64) bool {
	t := s.digits(true)
	if t == nil {
		return false
	}
	n, err := strconv.ParseInt(string(t), 10, 64)
	*v = n
	return err == nil
}

func (s *scanner) int(v *int) bool {
	t := s.digits(true)
	if t == nil {
		return false
	}
	n, err := strconv.ParseInt(string(t), 10, strconv.IntSize)
	*v = int(n)
	return err == nil
}

func (s *scanner) uint64(v *uint64) bool {
	t := s.digits(false)
	if t == nil {
		return false
	}
	n, err := strconv.ParseUint(string(t), 10, 64)
	*v = n
	return err == nil
}

// blob reads {"n": int, "enc": string, "data": base64} (samples and
// experts).
func (s *scanner) blob(n *int, enc *string, data *[]byte) bool {
	var seen uint8
	return s.object(func(key []byte) bool {
		var bit uint8
		var good bool
		switch string(key) {
		case "n":
			bit, good = 1, s.int(n)
		case "enc":
			v := s.str()
			bit, good, *enc = 2, v != nil, string(v)
		case "data":
			v := s.str()
			if v == nil {
				return false
			}
			d := make([]byte, base64.StdEncoding.DecodedLen(len(v)))
			k, err := base64.StdEncoding.Decode(d, v)
			bit, good, *data = 4, err == nil, d[:k]
		default:
			return false
		}
		if !good || seen&bit != 0 {
			return false
		}
		seen |= bit
		return true
	})
}

// progress reads {"phase": string, "done": int, "total": int, "message": string}.
func (s *scanner) progress(p *Progress) bool {
	var seen uint8
	return s.object(func(key []byte) bool {
		var bit uint8
		var good bool
		switch string(key) {
		case "phase", "message":
			v := s.str()
			good = v != nil
			if bit = 1; key[0] == 'p' {
				p.Phase = string(v)
			} else {
				bit, p.Message = 2, string(v)
			}
		case "done":
			bit, good = 4, s.int64(&p.Done)
		case "total":
			bit, good = 8, s.int64(&p.Total)
		default:
			return false
		}
		if !good || seen&bit != 0 {
			return false
		}
		seen |= bit
		return true
	})
}
