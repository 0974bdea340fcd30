package expert

// Sub returns the counters accumulated between before and s (s taken
// later from the same store): every counter is s's minus before's; the
// gauges CacheBytes and PeakBytes are s's. It is the one way a phase's
// counters are taken from a store's running totals.
func (s Stats) Sub(before Stats) Stats {
	d := Stats{
		Uses: s.Uses - before.Uses, Demanded: s.Demanded - before.Demanded, Hits: s.Hits - before.Hits, Misses: s.Misses - before.Misses,
		PrefetchIssued: s.PrefetchIssued - before.PrefetchIssued, PrefetchUsed: s.PrefetchUsed - before.PrefetchUsed,
		PrefetchWasted: s.PrefetchWasted - before.PrefetchWasted, PrefetchCancelled: s.PrefetchCancelled - before.PrefetchCancelled,
		PrefetchSkipped: s.PrefetchSkipped - before.PrefetchSkipped, Reads: s.Reads - before.Reads, SpecReads: s.SpecReads - before.SpecReads,
		BytesRead: s.BytesRead - before.BytesRead, Stall: s.Stall - before.Stall,
		CacheBytes: s.CacheBytes, PeakBytes: s.PeakBytes,
		HostCompute: s.HostCompute - before.HostCompute, DeviceCompute: s.DeviceCompute - before.DeviceCompute,
		DeviceStall: s.DeviceStall - before.DeviceStall, DevicePrefill: s.DevicePrefill - before.DevicePrefill,
		IO: s.IO.Sub(before.IO),
	}
	if len(s.PredLayers) > 0 {
		d.PredLayers = make([]PredStats, len(s.PredLayers))
		for i, p := range s.PredLayers {
			if i < len(before.PredLayers) {
				b := before.PredLayers[i]
				p = PredStats{Uses: p.Uses - b.Uses, Correct: p.Correct - b.Correct, Predicted: p.Predicted - b.Predicted, Demanded: p.Demanded - b.Demanded}
			}
			d.PredLayers[i] = p
		}
	}
	return d
}

// Add adds the counters of d (a Sub result) to s; the gauges become d's.
func (s *Stats) Add(d Stats) {
	s.Uses += d.Uses
	s.Demanded += d.Demanded
	s.Hits += d.Hits
	s.Misses += d.Misses
	s.PrefetchIssued += d.PrefetchIssued
	s.PrefetchUsed += d.PrefetchUsed
	s.PrefetchWasted += d.PrefetchWasted
	s.PrefetchCancelled += d.PrefetchCancelled
	s.PrefetchSkipped += d.PrefetchSkipped
	s.Reads += d.Reads
	s.SpecReads += d.SpecReads
	s.BytesRead += d.BytesRead
	s.Stall += d.Stall
	s.CacheBytes, s.PeakBytes = d.CacheBytes, d.PeakBytes
	s.HostCompute += d.HostCompute
	s.DeviceCompute += d.DeviceCompute
	s.DeviceStall += d.DeviceStall
	s.DevicePrefill += d.DevicePrefill
	s.IO.Add(d.IO)
	if len(s.PredLayers) < len(d.PredLayers) {
		s.PredLayers = append(s.PredLayers, make([]PredStats, len(d.PredLayers)-len(s.PredLayers))...)
	}
	for i, p := range d.PredLayers {
		q := &s.PredLayers[i]
		q.Uses += p.Uses
		q.Correct += p.Correct
		q.Predicted += p.Predicted
		q.Demanded += p.Demanded
	}
}
