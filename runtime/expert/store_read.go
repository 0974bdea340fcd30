package expert

import (
	"fmt"
	"time"

	"github.com/lesfarm/lesfarm/runtime/trace"
)

// fetch implements readHandler: it reads e's expert into buf, the entry's
// own buffer, with the store's reader (which, under a storage profile,
// waits as long as the emulated device would take). A read still
// speculative when it completes (a prefetch no Use has demanded yet) is
// then rearranged into the kernels' swizzled layout (swizzleExpert) on
// this worker, overlapping the model's compute as the read did. A read the
// model waits for is handed out in the file's layout: rearranging it
// (100–120 µs per MB of freshly read bytes on the 2-vCPU host) would add
// to the model's stall about what the faster kernels save on its uses
// (measured on the capped ladder, docs/les.md). The latency is the read's
// alone.
func (s *Store) fetch(e *entry, buf []byte) readResult {
	start := time.Now()
	f, err := s.rd.expert(s.ctx, e.key, buf, &e.spec)
	latency := time.Since(start)
	if err == nil && e.spec.Load() {
		// Each read swizzles its bytes once: a cache hit hands out the
		// entry's weights as they are, and a buffer reused for another
		// expert is read afresh from the file first. The naive mode never
		// gets here: it emulates a mapping of the file, whose pages the
		// kernels read in the file's layout.
		if err = f.w.Swizzle(&s.shapes[e.key.Layer]); err != nil {
			err = fmt.Errorf("expert: %v: %w", e.key, err)
		}
	}
	return readResult{w: f.w, n: f.n, err: err, latency: latency}
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
