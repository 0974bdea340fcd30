package expert

import "time"

// LayerStats is what the store measured for the latest Use of one layer.
type LayerStats struct {
	Predicted    []int
	Hits, Misses int
	// Missed lists the demanded experts that were not resident when
	// demanded (len(Missed) == Misses), in demand order.
	Missed         []int
	PrefetchUsed   int
	PrefetchWasted int
	Stall          time.Duration
}

// Stats are cumulative counters since the store opened or its Meter's Reset.
type Stats struct {
	Uses              int64 // Use calls
	Demanded          int64 // experts demanded
	Hits              int64 // demanded and resident
	Misses            int64 // demanded and not resident
	PrefetchIssued    int64 // speculative reads queued
	PrefetchUsed      int64 // speculative reads later demanded
	PrefetchWasted    int64 // speculative reads not demanded by their layer
	PrefetchCancelled int64 // speculative reads cancelled before they started
	PrefetchSkipped   int64 // predictions not worth their read (prefetchGate)
	Reads             int64 // completed reads
	SpecReads         int64 // of which speculative
	BytesRead         int64
	Stall             time.Duration // Use waiting on reads
	CacheBytes        int64         // bytes resident now
	PeakBytes         int64         // most bytes held (entries + reusable buffers)
	// Device time (Options.DeviceTime), decode only: the host's time in
	// the timed compute segments, the device's modelled time for them, and
	// the time Use waited outside compute divided by the dilation.
	HostCompute, DeviceCompute, DeviceStall time.Duration
	// DevicePrefill is the device's time for the passes of several
	// positions that are not a speculative verify (prefill): their
	// compute (each segment's weights once with its FLOPs for every
	// position, each expert of the pass once at the weight bandwidth), the
	// waits for their reads and their output head. Device time only.
	DevicePrefill time.Duration
	// Prediction quality per layer, for layers that had a prediction.
	PredLayers []PredStats
	// IO is the store's preads by size and queue depth, with their
	// service times (iostats.go): on direct storage what the disk did.
	IO IOHist
}

// PredStats sums the predictor's hits for one layer: Correct =
// Σ|predicted ∩ demanded|, Predicted = Σ|predicted|, Demanded = Σ|demanded|
// over Uses with a prediction.
type PredStats struct {
	Uses, Correct, Predicted, Demanded int64
}

// Precision returns Correct/Predicted, or 0.
func (p PredStats) Precision() float64 { return ratio(p.Correct, p.Predicted) }

// Recall returns Correct/Demanded, or 0.
func (p PredStats) Recall() float64 { return ratio(p.Correct, p.Demanded) }

func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// Prediction sums PredLayers.
func (s Stats) Prediction() PredStats {
	var t PredStats
	for _, p := range s.PredLayers {
		t.Uses += p.Uses
		t.Correct += p.Correct
		t.Predicted += p.Predicted
		t.Demanded += p.Demanded
	}
	return t
}

// DeviceTime returns the decode time the device would take:
// DeviceCompute + DeviceStall (0 without device time).
func (s Stats) DeviceTime() time.Duration { return s.DeviceCompute + s.DeviceStall }

// Dilation returns HostCompute / DeviceCompute, the host seconds per device
// second of compute over the counted segments, or 0.
func (s Stats) Dilation() float64 {
	if s.DeviceCompute <= 0 {
		return 0
	}
	return s.HostCompute.Seconds() / s.DeviceCompute.Seconds()
}

// HitRate returns Hits/Demanded.
func (s Stats) HitRate() float64 { return ratio(s.Hits, s.Demanded) }

type stepAcc struct {
	stall time.Duration
	bytes int64
}
