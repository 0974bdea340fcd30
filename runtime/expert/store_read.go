package expert

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/lesfarm/lesfarm/runtime/moe"
	"github.com/lesfarm/lesfarm/runtime/trace"
)

// fetch implements reader: it preads e's expert and, under a storage
// profile, waits as long as the emulated device would take.
func (s *Store) fetch(e *entry, buf []byte) readResult {
	start := time.Now()
	w, n, runs, err := s.read(e, buf)
	if err == nil && s.throttle != nil {
		// The runs are issued one after the other, so each costs the
		// device's per-read latency: a compat-layout expert (two runs)
		// pays it twice, a packed blob once.
		err = s.throttle.Wait(s.ctx, start.Add(time.Duration(runs-1)*s.throttle.latency(n/int64(runs))), n, &e.spec)
	}
	return readResult{w: w, n: n, err: err, latency: time.Since(start)}
}

// finishLocked implements reader: it counts the read and makes e resident,
// or drops it when the read failed.
func (s *Store) finishLocked(e *entry, r readResult) {
	s.meter.stats.Reads++
	s.meter.stats.BytesRead += r.n
	s.meter.step.bytes += r.n
	if e.wasSpec {
		s.meter.stats.SpecReads++
	}
	if r.err != nil {
		e.state = stFailed
		e.err = r.err
		if s.entries[e.key] == e {
			delete(s.entries, e.key)
			s.budget.policy.Remove(e.key)
		}
		s.strat.abandon() // the schedule no longer matches the store
		if e.pins == 0 {
			s.releaseLocked(e)
		}
		return
	}
	e.state = stReady
	e.w = r.w // the policy saw it at issue (issuedLocked)
}

// reported implements reader: it sends the read event to the sink.
func (s *Store) reported(e *entry, r readResult) {
	if s.opts.Sink != nil {
		s.opts.Sink.Read(&trace.ReadEvent{Layer: int(e.key.Layer), Expert: int(e.key.Expert), Bytes: r.n, Latency: r.latency, Speculative: e.wasSpec, Err: r.err})
	}
}

// read preads expert e into buf and returns its weights, the bytes read
// and the number of preads.
func (s *Store) read(e *entry, buf []byte) (moe.Weights, int64, int, error) {
	parts := s.layout.Experts[e.key.Layer][e.key.Expert]
	p := planRead(parts, s.align)
	var total int64
	for _, r := range p.runs {
		dst := buf[r.bufOff : r.bufOff+r.n]
		t0, a0 := s.meter.io.begin()
		n, err := s.f.ReadAt(dst, r.off)
		s.meter.io.end(t0, a0, r.n)
		total += int64(n)
		// The last aligned read of a file may stop at its end; only the
		// expert's own bytes must be there.
		need := int64(0)
		for _, x := range p.parts {
			if x.Off >= r.bufOff && x.Off < r.bufOff+r.n {
				need = max(need, x.Off+x.Len-r.bufOff)
			}
		}
		if int64(n) < need {
			if err == nil || errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return moe.Weights{}, total, len(p.runs), fmt.Errorf("expert: reading %v from %s (bytes %d-%d): %w (file truncated or changed under the runtime?)", e.key, s.path, r.off, r.off+need, err)
		}
	}
	part := func(i int) []byte { x := p.parts[i]; return buf[x.Off : x.Off+x.Len : x.Off+x.Len] }
	return moe.Weights{Gate: part(0), Up: part(1), Down: part(2)}, total, len(p.runs), nil
}
