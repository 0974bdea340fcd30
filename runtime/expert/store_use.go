package expert

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lesfarm/lesfarm/runtime/moe"
)

// Use implements moe.Source. How reads and compute interleave depends on
// the mode; the experts used and their weights never do.
func (s *Store) Use(ctx context.Context, layer int, experts []int, fn func(int, moe.Weights) error) error {
	if s.clock != nil {
		return s.useClocked(ctx, layer, experts, fn)
	}
	return s.use(ctx, layer, experts, fn)
}

// use checks the layer and serves the Use through the mode's strategy.
func (s *Store) use(ctx context.Context, layer int, experts []int, fn func(int, moe.Weights) error) error {
	if layer < 0 || layer >= len(s.shapes) {
		return fmt.Errorf("expert: layer %d out of range [0, %d)", layer, len(s.shapes))
	}
	if len(experts) == 0 {
		return nil
	}
	return s.strat.serve(ctx, s, layer, experts, fn)
}

// serveDemand is the cache modes' Use (demandLoop): it pins what is
// resident, runs the demand loop and lets the strategy schedule after it.
func (s *Store) serveDemand(ctx context.Context, layer int, experts []int, fn func(int, moe.Weights) error) error {
	items := make([]*entry, len(experts))
	done := make([]bool, len(experts))
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errors.New("expert: store is closed")
	}
	if err := s.beginUseLocked(layer, experts, items); err != nil {
		s.mu.Unlock()
		return err
	}
	s.mu.Unlock()

	err := s.run(ctx, layer, experts, items, done, fn)

	s.mu.Lock()
	for i, e := range items {
		if e != nil && !done[i] {
			s.cache.unpin(e)
		}
	}
	if err == nil {
		s.strat.scheduleLocked(s)
	}
	s.mu.Unlock()
	return err
}

// beginUseLocked validates the demand, updates statistics, settles the
// speculative reads issued for this layer and pins what is resident.
func (s *Store) beginUseLocked(layer int, experts []int, items []*entry) error {
	ls := &s.meter.layers[layer]
	ls.Hits, ls.Misses, ls.PrefetchUsed, ls.PrefetchWasted, ls.Stall = 0, 0, 0, 0, 0
	ls.Missed = ls.Missed[:0]
	s.cache.useSeq++
	s.curDemand = s.curDemand[:0]
	for i, x := range experts {
		if x < 0 || x >= s.shapes[layer].Experts {
			return fmt.Errorf("expert: layer %d has no expert %d", layer, x)
		}
		for _, y := range experts[:i] {
			if x == y {
				return fmt.Errorf("expert: layer %d expert %d demanded twice in one call", layer, x)
			}
		}
		s.curDemand = append(s.curDemand, Key{int32(layer), int32(x)})
	}
	if s.meter.rec != nil {
		s.meter.rec.Calls = append(s.meter.rec.Calls, TraceCall{Layer: layer, Experts: append([]int(nil), experts...)})
	}
	// Predictor quality.
	if p := s.predicted[layer]; s.hasPred[layer] {
		ps := &s.meter.stats.PredLayers[layer]
		ps.Uses++
		ps.Predicted += int64(len(p))
		ps.Demanded += int64(len(experts))
		for _, x := range p {
			for _, y := range experts {
				if x == y {
					ps.Correct++
					break
				}
			}
		}
		s.hasPred[layer] = false
		if s.gate != nil && len(p) <= s.opts.PredictK {
			s.gate.observe(layer, p, experts)
		}
	}
	if s.gate != nil {
		s.gate.demand(layer, experts)
	}
	s.meter.stats.Uses++
	s.meter.stats.Demanded += int64(len(experts))
	promoted := 0
	for i, k := range s.curDemand {
		s.cache.policy().Access(k)
		e := s.cache.entries[k]
		if e == nil {
			s.meter.stats.Misses++
			ls.Misses++
			ls.Missed = append(ls.Missed, int(k.Expert))
			continue
		}
		items[i] = e
		e.pins++
		e.demandSeq = s.cache.useSeq
		if s.cache.ready(e) {
			s.meter.stats.Hits++
			ls.Hits++
		} else {
			s.meter.stats.Misses++
			ls.Misses++
			ls.Missed = append(ls.Missed, int(k.Expert))
		}
		if e.spec.Swap(false) {
			s.meter.stats.PrefetchUsed++
			ls.PrefetchUsed++
			if s.clock != nil && s.clock.ps != nil && !s.cache.ready(e) {
				s.clock.ps.promote(e, s.clock.now) // in flight: now demanded
			}
		}
		if e.inSpecQ {
			s.q.promoteLocked(e)
			promoted++
		}
	}
	s.q.wakeLocked(promoted)
	// Speculative reads for this layer that were not demanded: cancel the
	// ones not started, count the rest as wasted.
	for _, e := range s.specFor[layer] {
		if !e.spec.Load() {
			continue
		}
		e.spec.Store(false)
		if e.inSpecQ {
			s.q.dropSpecLocked(e)
			delete(s.cache.entries, e.key)
			s.forgetIssuedLocked(e)
			s.cache.release(e)
			s.meter.stats.PrefetchCancelled++
			continue
		}
		s.meter.stats.PrefetchWasted++
		ls.PrefetchWasted++
	}
	clear(s.specFor[layer])
	s.specFor[layer] = s.specFor[layer][:0]
	if err := s.strat.err(); err != nil {
		for _, e := range items {
			if e != nil {
				s.cache.unpin(e)
			}
		}
		clear(items)
		return err
	}
	return nil
}

// run is the demand loop of Use: it issues the missing reads (one at a time
// for a serial strategy), and calls fn for experts in the order the
// strategy picks.
func (s *Store) run(ctx context.Context, layer int, experts []int, items []*entry, done []bool, fn func(int, moe.Weights) error) error {
	remaining := len(experts)
	ls := &s.meter.layers[layer]
	for remaining > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		s.mu.Lock()
		s.strat.scheduleLocked(s)
		// Issue reads for experts that have no entry.
		inFlight, pending := 0, 0
		for i, e := range items {
			if e != nil && !done[i] && !s.cache.ready(e) && e.state != stFailed {
				inFlight++
			}
		}
		issued := 0
		for i, e := range items {
			if e != nil || done[i] {
				continue
			}
			if s.strat.serial() && (inFlight > 0 || !allDone(done[:i])) {
				pending++
				continue
			}
			k := Key{int32(layer), int32(experts[i])}
			if x := s.cache.entries[k]; x != nil { // appeared meanwhile (oracle prefetch)
				x.pins++
				x.demandSeq = s.cache.useSeq
				items[i] = x
				if !s.cache.ready(x) {
					inFlight++
				}
				continue
			}
			if s.strat.planned() {
				pending++ // the oracle's plan reads it
				continue
			}
			buf, ok := s.cache.alloc(s.bufSize[layer], s.cache.evictable)
			if !ok && s.cancelQueuedSpecLocked() {
				buf, ok = s.cache.alloc(s.bufSize[layer], s.cache.evictable)
			}
			if !ok {
				pending++
				continue
			}
			ne := &entry{key: k, buf: buf, state: stQueued, pins: 1, demandSeq: s.cache.useSeq}
			s.cache.entries[k] = ne
			s.q.pushDemandLocked(ne)
			items[i] = ne
			inFlight++
			issued++
		}
		s.q.wakeLocked(issued)
		// Pick what may be computed now.
		firstReady, inOrder := -1, -1
		allReady := pending == 0
		orderOpen := true
		for i, e := range items {
			if done[i] {
				continue
			}
			if e != nil && e.state == stFailed {
				err := e.err
				s.mu.Unlock()
				return err
			}
			if e == nil || !s.cache.ready(e) {
				allReady = false
				orderOpen = false
				continue
			}
			if firstReady < 0 {
				firstReady = i
			}
			if orderOpen && inOrder < 0 {
				inOrder = i
			}
		}
		blocked := inFlight == 0 && pending > 0
		ready := s.strat.pick(firstReady, inOrder, allReady)
		if ready < 0 && blocked {
			ready = firstReady // free budget by computing what is here
		}
		canCompute := ready >= 0
		if !canCompute && blocked && s.q.specIdleLocked() && !s.anyReadingLocked() {
			if t := s.nextEvictableDoneLocked(); t >= 0 {
				// In device time a read done on the host may still be
				// landing on the device clock, and its buffer cannot be
				// evicted before: the device waits for it.
				s.clock.stall(t)
				s.mu.Unlock()
				continue
			}
			if s.strat.abandon() {
				// The plan cannot go on (it diverged from the store):
				// serve demand with Belady eviction from here on.
				s.log.Warn("expert: oracle: the plan stalled; continuing with Belady eviction on demand", "layer", layer)
				s.mu.Unlock()
				continue
			}
			s.mu.Unlock()
			return fmt.Errorf("expert: layer %d: budget %d bytes cannot hold the experts this step needs", layer, s.opts.Budget)
		}
		if canCompute && s.clock != nil && items[ready].state != stReady {
			// Done on the device clock, still being read on the host:
			// wait for the pread, which costs no device time.
			s.mu.Unlock()
			select {
			case <-s.q.done:
			case <-ctx.Done():
				return ctx.Err()
			}
			continue
		}
		if !canCompute && s.clock != nil {
			if t := s.nextDoneLocked(items, done); t >= 0 {
				s.clock.stall(t) // device stall: wait for the next read on the clock
				s.mu.Unlock()
				continue
			}
		}
		if canCompute {
			e := items[ready]
			w := e.w
			e.doneSeq = s.cache.useSeq
			s.mu.Unlock()
			if err := fn(ready, w); err != nil {
				return err
			}
			s.mu.Lock()
			done[ready] = true
			remaining--
			s.cache.unpin(e)
			s.mu.Unlock()
			continue
		}
		s.mu.Unlock()
		t0 := time.Now()
		select {
		case <-s.q.done:
		case <-ctx.Done():
			return ctx.Err()
		}
		d := time.Since(t0)
		s.mu.Lock()
		s.meter.stats.Stall += d
		s.meter.step.stall += d
		ls.Stall += d
		s.mu.Unlock()
	}
	return nil
}

func allDone(d []bool) bool {
	for _, x := range d {
		if !x {
			return false
		}
	}
	return true
}

// cancelQueuedSpecLocked cancels every speculative read that has not
// started, freeing its buffer for demand, and reports whether it did any.
func (s *Store) cancelQueuedSpecLocked() bool {
	drained := s.q.drainSpecLocked(func(e *entry) {
		if e.spec.Swap(false) {
			s.meter.stats.PrefetchCancelled++
		}
		if s.cache.entries[e.key] == e {
			delete(s.cache.entries, e.key)
			s.forgetIssuedLocked(e)
		}
		s.cache.release(e)
	})
	if drained && s.strat.abandon() {
		// Cancelled oracle reads: the schedule no longer matches.
		s.log.Warn("expert: oracle: demand cancelled scheduled reads; continuing with Belady eviction on demand")
	}
	return drained
}

func (s *Store) anyReadingLocked() bool {
	return s.q.demandQueuedLocked() || s.cache.reading()
}
