package expert

import (
	"time"

	"github.com/lesfarm/lesfarm/runtime/trace"
)

// fetch implements readHandler: it reads e's expert with the store's
// reader (which, under a storage profile, waits as long as the emulated
// device would take).
func (s *Store) fetch(e *entry, buf []byte) readResult {
	start := time.Now()
	f, err := s.rd.expert(s.ctx, e.key, buf, &e.spec)
	return readResult{w: f.w, n: f.n, err: err, latency: time.Since(start)}
}

// finishLocked implements readHandler: it counts the read and makes e resident,
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
		s.cache.drop(e)
		s.strat.abandon() // the schedule no longer matches the store
		return
	}
	e.state = stReady
	e.w = r.w // the policy saw it at issue (issuedLocked)
}

// reported implements readHandler: it sends the read event to the sink.
func (s *Store) reported(e *entry, r readResult) {
	if s.opts.Sink != nil {
		s.opts.Sink.Read(&trace.ReadEvent{Layer: int(e.key.Layer), Expert: int(e.key.Expert), Bytes: r.n, Latency: r.latency, Speculative: e.wasSpec, Err: r.err})
	}
}
