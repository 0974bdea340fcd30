package expert

import (
	"sync"
	"time"
)

// Meter is a store's statistics: the cumulative counters (Stats), what
// the latest Use of each layer measured (LayerStats), the per-token
// accumulators the trace events take, the recorded routing
// (Options.Record) and the pread histogram (Stats.IO). The store counts
// into it as it serves; callers read and reset it through Store.Meter.
// Its methods are safe for concurrent use: the store's lock guards it
// (the histogram has its own). A Store owns its Meter; the zero value is
// not usable.
type Meter struct {
	mu     *sync.Mutex // the store's
	stats  Stats
	layers []LayerStats
	step   stepAcc // since the latest TokenEvent
	rec    *RoutingTrace
	io     ioMeter
	// gauges returns CacheBytes and PeakBytes, with mu held.
	gauges func() (cache, peak int64)
	clock  *DeviceClock // nil without device time
}

func (m *Meter) init(mu *sync.Mutex, layers int, gauges func() (cache, peak int64)) {
	m.mu = mu
	m.gauges = gauges
	m.layers = make([]LayerStats, layers)
	m.stats.PredLayers = make([]PredStats, layers)
}

// Meter returns the store's statistics.
func (s *Store) Meter() *Meter { return &s.meter }

// Stats returns the cumulative counters since the store opened or the
// latest Reset, with the gauges (CacheBytes, PeakBytes) as they are now
// and, under device time, the device clock's decode totals.
func (m *Meter) Stats() Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.stats
	st.PredLayers = append([]PredStats(nil), m.stats.PredLayers...)
	st.CacheBytes, st.PeakBytes = m.gauges()
	st.IO = m.io.snapshot()
	if m.clock != nil {
		st.HostCompute, st.DeviceCompute, st.DeviceStall = m.clock.totals()
		st.DevicePrefill = m.clock.prefillTotal()
	}
	return st
}

// Stall returns the cumulative time Use waited on reads (Stats().Stall,
// cheaper than Stats).
func (m *Meter) Stall() time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.stats.Stall
}

// Reset zeroes the cumulative counters and the device clock's totals
// (e.g. after warm-up or prefill); the cache keeps its contents and the
// clock runs on.
func (m *Meter) Reset() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stats = Stats{PredLayers: make([]PredStats, len(m.layers))}
	m.step = stepAcc{}
	m.io.reset()
	if m.clock != nil {
		m.clock.reset()
	}
}

// Layer returns what the latest Use of layer measured.
func (m *Meter) Layer(layer int) LayerStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	ls := m.layers[layer]
	ls.Predicted = append([]int(nil), ls.Predicted...)
	ls.Missed = append([]int(nil), ls.Missed...)
	return ls
}

// Recorded returns the routing recorded so far (Options.Record), or nil.
func (m *Meter) Recorded() *RoutingTrace {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.rec == nil {
		return nil
	}
	return &RoutingTrace{Calls: append([]TraceCall(nil), m.rec.Calls...)}
}

// Info describes a store: what it reads and how. It does not change
// after New.
type Info struct {
	Mode Mode
	// Direct reports whether reads bypass the page cache (O_DIRECT).
	Direct bool
	// Packed reports whether the store reads each expert as one blob of
	// a packed file (lesfarm pack) rather than three slices of stacked
	// tensors.
	Packed bool
	// ReadsPerExpert is the most preads the store issues to fetch one
	// expert: 1 for a packed (blob) file, 2 for a merged gate+up tensor
	// plus down (the compat layout of qwen35moe), 3 for separate stacked
	// tensors.
	ReadsPerExpert int
	// ExpertBytes[l] is the buffer bytes one expert of layer l takes.
	ExpertBytes []int64
	// Model identifies the store's model in the traces it records (name
	// and architecture only when the store was opened with Open).
	Model TraceModel
}

// Info returns what the store reads and how.
func (s *Store) Info() Info {
	n := 0
	for _, exps := range s.layout.Experts {
		for _, parts := range exps {
			n = max(n, len(planRead(parts, s.file.align).runs))
		}
	}
	return Info{
		Mode: s.opts.Mode, Direct: s.file.direct, Packed: s.layout.Packed, ReadsPerExpert: n,
		ExpertBytes: append([]int64(nil), s.bufSize...), Model: s.model,
	}
}
