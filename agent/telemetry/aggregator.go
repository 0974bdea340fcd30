package telemetry

import (
	"cmp"
	"sync"
	"time"

	"github.com/lesfarm/lesfarm/protocol"
	"github.com/lesfarm/lesfarm/runtime/trace"
)

// AggregatorConfig configures an Aggregator.
type AggregatorConfig struct {
	RunID    int64
	Token    int64
	DeviceID string
	// FlushEvery cuts a batch at least this often while samples are
	// pending; 0 means 500 ms.
	FlushEvery time.Duration
	// MaxEvents cuts a batch when it holds this many samples; 0 means 256
	// (at most protocol.MaxSamplesPerBatch).
	MaxEvents int
	// ExpertEvery is how many measured decode steps the per-expert counts
	// cover before a batch carries them (also at a config change and at
	// Close); 0 means DefaultExpertEvery.
	ExpertEvery int
	// Emit receives each finished batch, on the goroutine that completed it
	// (the runtime's, or the flush timer's). It must not block for long:
	// hand the batch to an Outbox.
	Emit func(*protocol.TelemetryBatch)
}

// Aggregator is a trace.Sink that turns runtime events into telemetry
// batches for one run attempt: one Sample per forward step with its layers'
// hit, miss and prefetch counts, and now and then per-expert demand and
// miss counts (experts.go). Batches are numbered from 0 without gaps.
// It is safe for concurrent use.
type Aggregator struct {
	cfg AggregatorConfig

	mu       sync.Mutex
	cfgIndex int
	rep      int
	layers   protocol.LayerCounts // counts of the step in progress
	maxLayer int                  // highest layer index seen in this step, -1 if none
	samples  []protocol.Sample
	progress *protocol.Progress
	seq      uint64
	nSamples uint64
	dropped  uint64
	timer    *time.Timer
	closed   bool

	experts expertCounts // per-expert counts since the last batch that carried them
}

// NewAggregator returns an aggregator; Close it to emit the last batch.
func NewAggregator(cfg AggregatorConfig) *Aggregator {
	cfg.FlushEvery = cmp.Or(cfg.FlushEvery, 500*time.Millisecond)
	cfg.MaxEvents = min(cmp.Or(cfg.MaxEvents, 256), protocol.MaxSamplesPerBatch)
	cfg.ExpertEvery = cmp.Or(cfg.ExpertEvery, DefaultExpertEvery)
	a := &Aggregator{cfg: cfg, maxLayer: -1}
	a.timer = time.AfterFunc(time.Hour, a.tick)
	a.timer.Stop()
	return a
}

// SetPosition says which config and repetition the following events belong
// to (repetition < 0 for warm-up runs).
func (a *Aggregator) SetPosition(configIndex, repetition int) {
	a.mu.Lock()
	if configIndex != a.cfgIndex && a.experts.pending() {
		a.experts.due = true // the finished config's counts go with the next batch
	}
	a.cfgIndex, a.rep = configIndex, repetition
	a.mu.Unlock()
}

// Progress attaches a progress note to the next batch and emits it at the
// next flush even when it holds no samples.
func (a *Aggregator) Progress(p protocol.Progress) {
	a.mu.Lock()
	a.progress = &p
	a.armLocked()
	a.mu.Unlock()
}

// AddDropped records detail dropped elsewhere (e.g. by the disk buffer) so
// the next batch reports it.
func (a *Aggregator) AddDropped(n uint64) {
	a.mu.Lock()
	a.dropped += n
	a.mu.Unlock()
}

// Layer implements trace.Sink.
func (a *Aggregator) Layer(ev *trace.LayerEvent) {
	if ev.Layer < 0 || ev.Layer >= protocol.MaxLayers {
		return
	}
	a.mu.Lock()
	l := &a.layers
	for len(l.Hits) <= ev.Layer {
		l.Hits = append(l.Hits, 0)
		l.Misses = append(l.Misses, 0)
		l.PrefetchUsed = append(l.PrefetchUsed, 0)
		l.PrefetchWasted = append(l.PrefetchWasted, 0)
	}
	l.Hits[ev.Layer] += int32(ev.Hits)
	l.Misses[ev.Layer] += int32(ev.Misses)
	l.PrefetchUsed[ev.Layer] += int32(ev.PrefetchUsed)
	l.PrefetchWasted[ev.Layer] += int32(ev.PrefetchWasted)
	a.maxLayer = max(a.maxLayer, ev.Layer)
	a.experts.layer(ev)
	a.mu.Unlock()
}

// Read implements trace.Sink; reads are summarised by the token event's
// byte and stall counts.
func (a *Aggregator) Read(*trace.ReadEvent) {}

// Token implements trace.Sink: it closes the step's sample.
func (a *Aggregator) Token(ev *trace.TokenEvent) {
	s := protocol.Sample{
		Step: ev.Step, Pos: ev.Pos, Tokens: max(ev.Tokens, 1),
		DurationNS: max(int64(ev.Duration), 0), StallNS: max(int64(ev.Stall), 0),
		BytesRead: max(ev.BytesRead, 0), CacheBytes: max(ev.CacheBytes, 0),
	}
	switch ev.Phase {
	case trace.Prefill:
		s.Phase = protocol.PhasePrefill
	case trace.Verify:
		s.Phase = protocol.PhaseVerify
	default:
		s.Phase = protocol.PhaseDecode
	}
	a.mu.Lock()
	s.ConfigIndex, s.Repetition = a.cfgIndex, a.rep
	if n := a.maxLayer + 1; n > 0 {
		l := &a.layers
		s.Layers = &protocol.LayerCounts{
			Hits: clone32(l.Hits[:n]), Misses: clone32(l.Misses[:n]),
			PrefetchUsed: clone32(l.PrefetchUsed[:n]), PrefetchWasted: clone32(l.PrefetchWasted[:n]),
		}
		clear(l.Hits)
		clear(l.Misses)
		clear(l.PrefetchUsed)
		clear(l.PrefetchWasted)
		a.maxLayer = -1
	}
	a.samples = append(a.samples, s)
	a.nSamples++
	due := a.experts.token(a.cfgIndex, a.rep, ev.Phase, a.cfg.ExpertEvery)
	var b *protocol.TelemetryBatch
	if len(a.samples) >= a.cfg.MaxEvents || due {
		b = a.cutLocked()
	} else {
		a.armLocked()
	}
	a.mu.Unlock()
	if b != nil {
		a.cfg.Emit(b)
	}
}

func clone32(s []int32) []int32 { return append([]int32(nil), s...) }

// armLocked starts the flush timer for the first pending item.
func (a *Aggregator) armLocked() {
	if !a.closed && (len(a.samples) == 1 || (len(a.samples) == 0 && a.progress != nil)) {
		a.timer.Reset(a.cfg.FlushEvery)
	}
}

func (a *Aggregator) tick() {
	a.mu.Lock()
	var b *protocol.TelemetryBatch
	if len(a.samples) > 0 || a.progress != nil || ((a.closed || a.experts.due) && a.experts.pending()) {
		b = a.cutLocked()
	}
	a.mu.Unlock()
	if b != nil {
		a.cfg.Emit(b)
	}
}

// cutLocked takes the pending samples as the next batch.
func (a *Aggregator) cutLocked() *protocol.TelemetryBatch {
	a.timer.Stop()
	b := &protocol.TelemetryBatch{
		V: protocol.Version, RunID: a.cfg.RunID, Token: a.cfg.Token, DeviceID: a.cfg.DeviceID,
		Seq: a.seq, Samples: a.samples, Dropped: a.dropped, Progress: a.progress, SentAt: time.Now().UTC(),
	}
	if a.experts.due || a.closed {
		b.Experts = a.experts.take()
	}
	a.seq++
	a.samples = make([]protocol.Sample, 0, a.cfg.MaxEvents)
	a.progress = nil
	a.dropped = 0
	return b
}

// Flush emits the pending samples now, if any.
func (a *Aggregator) Flush() { a.tick() }

// Close emits the last batch and stops the timer. Events after Close are
// still aggregated but only emitted by an explicit Flush.
func (a *Aggregator) Close() {
	a.mu.Lock()
	a.closed = true
	a.timer.Stop()
	a.mu.Unlock()
	a.tick()
}

// Counts returns how many batches were cut and samples recorded so far.
func (a *Aggregator) Counts() (batches, samples uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.seq, a.nSamples
}
