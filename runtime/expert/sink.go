package expert

import (
	"github.com/lesfarm/lesfarm/runtime/trace"
)

// FillLayerEvent adds the store's measurements for the latest Use of
// ev.Layer to ev: hits, misses (and which experts missed), prefetched-and-used, prefetched-and-wasted
// and stall (the model calls it before emitting each LayerEvent; it
// implements model.LayerReporter). It costs one mutex acquisition.
func (s *Store) FillLayerEvent(ev *trace.LayerEvent) {
	if ev.Layer < 0 || ev.Layer >= len(s.meter.layers) {
		return
	}
	s.mu.Lock()
	ls := &s.meter.layers[ev.Layer]
	ev.Hits, ev.Misses = ls.Hits, ls.Misses
	ev.Missed = append(ev.Missed[:0], ls.Missed...)
	ev.PrefetchUsed, ev.PrefetchWasted = ls.PrefetchUsed, ls.PrefetchWasted
	ev.Stall = ls.Stall
	s.mu.Unlock()
}

// FillTokenEvent adds the stall time and bytes read since the previous
// TokenEvent and the cache occupancy to ev (the generation loop calls it
// before emitting each TokenEvent; it implements generate.TokenReporter).
func (s *Store) FillTokenEvent(ev *trace.TokenEvent) {
	s.mu.Lock()
	ev.Stall = s.meter.step.stall
	ev.BytesRead = s.meter.step.bytes
	ev.CacheBytes = s.cache.budget.used
	s.meter.step = stepAcc{}
	s.mu.Unlock()
}
