package expert

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lesfarm/lesfarm/runtime/moe"
	"github.com/lesfarm/lesfarm/runtime/trace"
)

// Options configures a Store. The zero value of each field means the
// documented default; Budget is required.
type Options struct {
	Mode Mode
	// Budget is the most bytes of expert data resident at once, counting
	// reads in flight and reusable buffers. It must hold at least one
	// expert.
	Budget int64
	// Policy names the cache policy (NewPolicy); default "lfu". The oracle
	// mode always uses Belady's policy.
	Policy string
	// Profile emulates a device's storage (bandwidth, latency, reads in
	// flight); nil reads at the real speed of the file.
	Profile *Profile
	// Direct opens the file with O_DIRECT (F_NOCACHE on Darwin) so reads
	// hit the disk, falling back to buffered reads where unsupported.
	Direct bool
	// Workers is the number of concurrent reads; default
	// Profile.MaxInFlight, else 16.
	Workers int
	// PredictK is how many experts the model should predict per token for
	// the next layer in the lookahead modes; default DefaultPredictK(8)
	// (Open derives it from the model's experts per token).
	PredictK int
	// SpecInFlight bounds speculative reads in flight; default a quarter
	// of Workers, at least 1.
	SpecInFlight int
	// Trace is the recorded routing the oracle mode replays.
	Trace *RoutingTrace
	// Record makes the store record its routing (RecordedTrace).
	Record bool
	// Sink receives a ReadEvent per completed read; nil discards.
	Sink trace.Sink
	// Logger logs fallbacks; default slog.Default().
	Logger *slog.Logger
}

// DefaultPredictK returns how many experts per token the lookahead modes
// prefetch for a model that routes each token to used experts: the top
// three quarters of the predicted set, rounded up (6 of a top-8 model).
// The predictor's lower ranks are wrong more often than right, and a wrong
// prefetch costs a read and evicts a cached expert. Measured on the
// phone-shaped model at a 20% budget under phone-flagship (docs/les.md):
// ranks 7 and 8 were demanded 43% of the times they were prefetched, rank 6
// 61%; predicting 6 instead of 8 cut wasted reads from 27 to 11.5 per token
// and raised scheduled decode from 26.0 to 28.0 tok/s (on direct storage
// from 16.3 to 17.9).
func DefaultPredictK(used int) int {
	if used <= 0 {
		return 0
	}
	return (3*used + 3) / 4
}

// Store is the LES expert store: a moe.Source that keeps a byte-budgeted
// cache of experts and reads the rest from the model file with a pool of
// pread workers. Demanded reads always go before speculative ones. The
// model calls it from one goroutine; its workers are internal. Close it
// when done.
type Store struct {
	opts     Options
	path     string
	f        *os.File
	direct   bool
	align    int64
	layout   Layout
	shapes   []moe.LayerShape
	bufSize  []int64 // per layer: buffer bytes per expert
	throttle *Throttle
	procs    func() // gives back the Ps lent to throttled workers
	specMax  int
	log      *slog.Logger

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu         sync.Mutex
	work       *sync.Cond // workers wait for jobs
	wake       chan struct{}
	entries    map[Key]*entry
	policy     Policy
	oracle     *Oracle
	used       int64 // bytes in entries (resident, queued or reading)
	free       map[int64][][]byte
	freeBytes  int64
	demandQ    []*entry
	specQ      []*entry
	specFlight int
	demFlight  int // demanded reads in flight
	closed     bool
	useSeq     uint64
	curDemand  []Key
	predicted  [][]int
	hasPred    []bool
	specFor    [][]*entry // per target layer: speculative entries issued for it
	layerStats []LayerStats
	stats      Stats
	step       stepAcc
	rec        *RoutingTrace
	readErr    error
	plan       *OraclePlan // the oracle's reads; nil once it no longer applies
	planNext   int         // index of the next read of plan to issue
}

// entry states.
const (
	stQueued = iota
	stReading
	stReady
	stFailed
)

type entry struct {
	key       Key
	buf       []byte
	w         moe.Weights
	state     int
	spec      atomic.Bool // issued speculatively and not demanded yet
	wasSpec   bool        // issued speculatively (for the read event)
	pins      int
	err       error
	demandSeq uint64 // Use that demanded it last
	doneSeq   uint64 // Use that computed it last
	target    int    // layer a speculative read was issued for
	inSpecQ   bool   // queued in specQ (not started)
}

// LayerStats is what the store measured for the latest Use of one layer.
type LayerStats struct {
	Predicted      []int
	Hits, Misses   int
	PrefetchUsed   int
	PrefetchWasted int
	Stall          time.Duration
}

// Stats are cumulative counters since the store opened or ResetStats.
type Stats struct {
	Uses              int64 // Use calls
	Demanded          int64 // experts demanded
	Hits              int64 // demanded and resident
	Misses            int64 // demanded and not resident
	PrefetchIssued    int64 // speculative reads queued
	PrefetchUsed      int64 // speculative reads later demanded
	PrefetchWasted    int64 // speculative reads not demanded by their layer
	PrefetchCancelled int64 // speculative reads cancelled before they started
	Reads             int64 // completed reads
	SpecReads         int64 // of which speculative
	BytesRead         int64
	Stall             time.Duration // Use waiting on reads
	CacheBytes        int64         // bytes resident now
	PeakBytes         int64         // most bytes held (entries + reusable buffers)
	// Prediction quality per layer, for layers that had a prediction.
	PredLayers []PredStats
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

// HitRate returns Hits/Demanded.
func (s Stats) HitRate() float64 { return ratio(s.Hits, s.Demanded) }

type stepAcc struct {
	stall time.Duration
	bytes int64
}

// ErrBudgetTooSmall is returned by New when the budget cannot hold one
// expert.
var ErrBudgetTooSmall = errors.New("expert: budget smaller than one expert")

// New opens the store over the model file at path, whose experts are where
// layout says and shaped as shapes.
func New(path string, layout Layout, shapes []moe.LayerShape, opts Options) (*Store, error) {
	if len(layout.Experts) != len(shapes) {
		return nil, fmt.Errorf("expert: layout has %d layers, shapes %d", len(layout.Experts), len(shapes))
	}
	if opts.Mode < OnDemand || opts.Mode > OracleMode {
		return nil, fmt.Errorf("expert: invalid mode %d", opts.Mode)
	}
	if opts.Mode == OracleMode && (opts.Trace == nil || len(opts.Trace.Calls) == 0) {
		return nil, errors.New("expert: the oracle mode needs a recorded routing trace (run once with recording first)")
	}
	opts.Logger = cmp.Or(opts.Logger, slog.Default())
	if opts.Workers == 0 && opts.Profile != nil {
		opts.Workers = opts.Profile.MaxInFlight
	}
	opts.Workers = cmp.Or(opts.Workers, 16)
	if opts.Workers < 1 || opts.Workers > 1024 {
		return nil, fmt.Errorf("expert: workers %d must be between 1 and 1024", opts.Workers)
	}
	opts.PredictK = cmp.Or(opts.PredictK, DefaultPredictK(8))
	if opts.PredictK < 0 {
		return nil, fmt.Errorf("expert: predict-k %d must not be negative", opts.PredictK)
	}
	opts.SpecInFlight = cmp.Or(opts.SpecInFlight, max(1, opts.Workers/4))
	if opts.Mode == OracleMode {
		opts.SpecInFlight = opts.Workers // perfect prefetch is never wasted
	}
	if opts.Profile != nil && opts.Profile.RAMBudget > 0 && opts.Budget > opts.Profile.RAMBudget {
		return nil, fmt.Errorf("expert: budget %d bytes exceeds profile %s's RAM budget %d bytes", opts.Budget, opts.Profile.Name, opts.Profile.RAMBudget)
	}
	var policy Policy
	var oracle *Oracle
	if opts.Mode == OracleMode {
		oracle = NewOracle(opts.Trace)
		policy = oracle
	} else {
		p, err := NewPolicy(opts.Policy)
		if err != nil {
			return nil, err
		}
		policy = p
	}

	f, direct, err := openModel(path, opts.Direct)
	if err != nil {
		return nil, err
	}
	if opts.Direct && !direct {
		opts.Logger.Warn("expert: O_DIRECT unsupported for this file, using buffered reads", "path", path)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("expert: %w", err)
	}
	s := &Store{
		opts: opts, path: path, f: f, direct: direct, align: 1, layout: layout, shapes: shapes,
		specMax: opts.SpecInFlight, log: opts.Logger,
		wake: make(chan struct{}, 1), entries: map[Key]*entry{}, policy: policy, oracle: oracle,
		free:       map[int64][][]byte{},
		predicted:  make([][]int, len(shapes)),
		hasPred:    make([]bool, len(shapes)),
		specFor:    make([][]*entry, len(shapes)),
		layerStats: make([]LayerStats, len(shapes)),
	}
	s.stats.PredLayers = make([]PredStats, len(shapes))
	if direct {
		s.align = directAlign
	}
	if opts.Record {
		s.rec = &RoutingTrace{}
	}
	if opts.Profile != nil {
		s.throttle = NewThrottle(opts.Profile)
	}
	var maxSize int64
	s.bufSize = make([]int64, len(shapes))
	for l, exps := range layout.Experts {
		if len(exps) != shapes[l].Experts {
			f.Close()
			return nil, fmt.Errorf("expert: layer %d: layout has %d experts, shape %d", l, len(exps), shapes[l].Experts)
		}
		want := shapes[l].Bytes()
		for e, parts := range exps {
			var sum int64
			for _, x := range parts {
				if x.Off < 0 || x.Len <= 0 || x.Off+x.Len > st.Size() {
					f.Close()
					return nil, fmt.Errorf("expert: layer %d expert %d: data [%d, %d) lies outside the %d-byte file (truncated?)", l, e, x.Off, x.Off+x.Len, st.Size())
				}
				sum += x.Len
			}
			if sum != want {
				f.Close()
				return nil, fmt.Errorf("expert: layer %d expert %d: %d bytes of data, shape needs %d", l, e, sum, want)
			}
			s.bufSize[l] = max(s.bufSize[l], planRead(parts, s.align).size)
		}
		maxSize = max(maxSize, s.bufSize[l])
	}
	if opts.Budget < maxSize {
		f.Close()
		return nil, fmt.Errorf("%w: budget %d bytes, one expert needs %d bytes", ErrBudgetTooSmall, opts.Budget, maxSize)
	}
	if oracle != nil {
		plan, err := oracle.Plan(func(k Key) int64 { return s.bufSize[k.Layer] }, opts.Budget)
		if err != nil {
			f.Close()
			return nil, err
		}
		s.plan = plan
	}
	s.work = sync.NewCond(&s.mu)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if s.throttle != nil || direct {
		// Workers block in nanosleep (emulated device) or in O_DIRECT
		// preads (real device); either way a blocked worker keeps its P
		// until sysmon takes it back, and the model goroutine it woke
		// waits for a P (reserveSleepProcs).
		s.procs = reserveSleepProcs(opts.Workers)
	}
	for range opts.Workers {
		s.wg.Add(1)
		go s.worker()
	}
	return s, nil
}

// Clone opens another store over the same file, layout and shapes with
// different options (e.g. another mode), so a recorded run can be replayed.
func (s *Store) Clone(opts Options) (*Store, error) {
	if opts.PredictK == 0 {
		opts.PredictK = s.opts.PredictK
	}
	return New(s.path, s.layout, s.shapes, opts)
}

// Close stops the workers and closes the file. Reads in flight finish
// first. Close is idempotent.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.work.Broadcast()
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
	if s.procs != nil {
		s.procs()
	}
	return s.f.Close()
}

// Direct reports whether reads bypass the page cache.
func (s *Store) Direct() bool { return s.direct }

// Mode returns the store's mode.
func (s *Store) Mode() Mode { return s.opts.Mode }

// ExpertBytes returns the buffer bytes one expert of layer takes.
func (s *Store) ExpertBytes(layer int) int64 { return s.bufSize[layer] }

// PredictK implements moe.Source.
func (s *Store) PredictK() int {
	if s.opts.Mode.speculative() {
		return s.opts.PredictK
	}
	return 0
}

// Stats returns the cumulative counters.
func (s *Store) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.PredLayers = append([]PredStats(nil), s.stats.PredLayers...)
	st.CacheBytes = s.cacheBytesLocked()
	return st
}

// StallTotal returns the cumulative time Use waited on reads (cheaper than
// Stats).
func (s *Store) StallTotal() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats.Stall
}

// ResetStats zeroes the cumulative counters (e.g. after warm-up or
// prefill); the cache keeps its contents.
func (s *Store) ResetStats() {
	s.mu.Lock()
	defer s.mu.Unlock()
	peak := s.stats.PeakBytes
	s.stats = Stats{PredLayers: make([]PredStats, len(s.shapes)), PeakBytes: peak}
	s.step = stepAcc{}
}

// RecordedTrace returns the routing recorded so far (Options.Record), or nil.
func (s *Store) RecordedTrace() *RoutingTrace {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rec == nil {
		return nil
	}
	return &RoutingTrace{Calls: append([]TraceCall(nil), s.rec.Calls...)}
}

func (s *Store) cacheBytesLocked() int64 {
	var n int64
	for _, e := range s.entries {
		if e.state == stReady {
			n += int64(len(e.buf))
		}
	}
	return n
}

// Prefetch implements moe.Source: in the lookahead modes it queues
// speculative reads of the predicted experts of layer that are not
// resident, as far as the budget allows without evicting experts the
// current layer needs. It never blocks on I/O.
func (s *Store) Prefetch(layer int, experts []int) {
	if layer < 0 || layer >= len(s.shapes) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.predicted[layer] = append(s.predicted[layer][:0], experts...)
	s.hasPred[layer] = true
	if s.rec != nil {
		s.rec.Calls = append(s.rec.Calls, TraceCall{Layer: layer, Experts: append([]int(nil), experts...), Prefetch: true})
	}
	s.layerStats[layer].Predicted = append(s.layerStats[layer].Predicted[:0], experts...)
	if !s.opts.Mode.speculative() || s.closed {
		return
	}
	queued := 0
	for _, x := range experts {
		if x < 0 || x >= s.shapes[layer].Experts {
			continue
		}
		k := Key{int32(layer), int32(x)}
		if _, ok := s.entries[k]; ok {
			continue
		}
		buf, ok := s.allocLocked(s.bufSize[layer], func(e *entry) bool { return s.specEvictable(e, layer) })
		if !ok {
			break
		}
		e := &entry{key: k, buf: buf, state: stQueued, wasSpec: true, target: layer}
		e.spec.Store(true)
		s.entries[k] = e
		s.specQ = append(s.specQ, e)
		e.inSpecQ = true
		s.specFor[layer] = append(s.specFor[layer], e)
		s.stats.PrefetchIssued++
		queued++
	}
	s.wakeWorkersLocked(queued)
}

// specEvictable says whether a speculative read for layer may evict e: only
// resident, unused experts outside the layer being computed and the target
// layer, and never another prefetch that has not been used yet.
func (s *Store) specEvictable(e *entry, target int) bool {
	if !s.evictable(e) || e.spec.Load() {
		return false
	}
	l := int(e.key.Layer)
	return l != target && l != target-1
}

// evictable says whether e may be evicted at all: resident, not pinned, and
// not demanded by the current Use without having been computed yet.
func (s *Store) evictable(e *entry) bool {
	if e.state != stReady || e.pins > 0 {
		return false
	}
	return !(e.demandSeq == s.useSeq && e.doneSeq != s.useSeq)
}

// allocLocked returns a buffer of size bytes, evicting what ok allows until
// the budget has room; false when it cannot. The budget counts entries and
// reusable buffers, so memory held never exceeds it.
func (s *Store) allocLocked(size int64, ok func(*entry) bool) ([]byte, bool) {
	for s.used+size > s.opts.Budget {
		v, found := s.policy.Victim(func(k Key) bool {
			e := s.entries[k]
			return e != nil && ok(e)
		})
		if !found {
			return nil, false
		}
		s.evictLocked(s.entries[v])
	}
	if l := s.free[size]; len(l) > 0 {
		b := l[len(l)-1]
		s.free[size] = l[:len(l)-1]
		s.freeBytes -= size
		s.used += size
		return b, true
	}
	// Drop reusable buffers of other sizes to make room.
	for sz, l := range s.free {
		for len(l) > 0 && s.used+s.freeBytes+size > s.opts.Budget {
			l = l[:len(l)-1]
			s.freeBytes -= sz
		}
		s.free[sz] = l
	}
	s.used += size
	s.stats.PeakBytes = max(s.stats.PeakBytes, s.used+s.freeBytes)
	return alignedBuf(size), true
}

// evictLocked removes a resident, unpinned entry and recycles its buffer.
func (s *Store) evictLocked(e *entry) {
	delete(s.entries, e.key)
	s.policy.Remove(e.key)
	s.releaseLocked(e)
}

func (s *Store) releaseLocked(e *entry) {
	if e.buf == nil {
		return
	}
	n := int64(len(e.buf))
	s.used -= n
	s.free[n] = append(s.free[n], e.buf)
	s.freeBytes += n
	e.buf = nil
	e.w = moe.Weights{}
}

// worker serves the read queues: demanded reads first, speculative reads
// only while fewer than specMax are in flight.
func (s *Store) worker() {
	defer s.wg.Done()
	if s.throttle != nil {
		pinWorker() // the thread ends with the goroutine (never unlocked)
	}
	for {
		s.mu.Lock()
		for !s.closed && len(s.demandQ) == 0 && !s.specMayStartLocked() {
			s.work.Wait()
		}
		if s.closed {
			s.mu.Unlock()
			return
		}
		var e *entry
		specSlot := false
		if len(s.demandQ) > 0 {
			e = s.demandQ[0]
			s.demandQ[0] = nil
			s.demandQ = s.demandQ[1:]
			s.demFlight++
		} else {
			e = s.specQ[0]
			s.specQ[0] = nil
			s.specQ = s.specQ[1:]
			e.inSpecQ = false
			s.specFlight++
			specSlot = true
		}
		e.state = stReading
		layer := int(e.key.Layer)
		buf := e.buf
		s.mu.Unlock()

		start := time.Now()
		w, n, err := s.read(e, buf)
		if err == nil && s.throttle != nil {
			err = s.throttle.Wait(s.ctx, start, n, &e.spec)
		}
		lat := time.Since(start)

		s.mu.Lock()
		if specSlot {
			s.specFlight--
		} else {
			s.demFlight--
		}
		s.stats.Reads++
		s.stats.BytesRead += n
		s.step.bytes += n
		if e.wasSpec {
			s.stats.SpecReads++
		}
		if err != nil {
			e.state = stFailed
			e.err = err
			if s.entries[e.key] == e {
				delete(s.entries, e.key)
			}
			s.plan = nil // the schedule no longer matches the store
			if e.pins == 0 {
				s.releaseLocked(e)
			}
		} else {
			e.state = stReady
			e.w = w
			s.policy.Insert(e.key)
		}
		// This worker takes the next job itself; wake one more only if a
		// freed speculative slot leaves work for it.
		if specSlot && len(s.specQ) > 1 {
			s.work.Signal()
		}
		if !specSlot && s.demFlight == 0 && s.throttle == nil {
			// Speculative reads held back by demand may start now.
			s.wakeWorkersLocked(min(len(s.specQ), s.specMax-s.specFlight))
		}
		s.mu.Unlock()
		select {
		case s.wake <- struct{}{}:
		default:
		}
		if s.opts.Sink != nil {
			s.opts.Sink.Read(&trace.ReadEvent{Layer: layer, Expert: int(e.key.Expert), Bytes: n, Latency: lat, Speculative: e.wasSpec, Err: err})
		}
	}
}

// specMayStartLocked says whether a worker may start a speculative read:
// one is queued, fewer than specMax are in flight, and, on real storage,
// no demanded read is in flight. A real device cannot tell demanded reads
// from speculative ones, so a speculative read started beside a demanded
// one delays it; speculation then only uses the time the device would
// otherwise be idle (compute). Under a storage profile the emulated device
// serves demanded transfers first itself, and the oracle's reads are all
// needed.
func (s *Store) specMayStartLocked() bool {
	if len(s.specQ) == 0 || s.specFlight >= s.specMax {
		return false
	}
	return s.throttle != nil || s.oracle != nil || s.demFlight == 0
}

// read preads expert e into buf and returns its weights and the bytes read.
func (s *Store) read(e *entry, buf []byte) (moe.Weights, int64, error) {
	parts := s.layout.Experts[e.key.Layer][e.key.Expert]
	p := planRead(parts, s.align)
	var total int64
	for _, r := range p.runs {
		dst := buf[r.bufOff : r.bufOff+r.n]
		n, err := s.f.ReadAt(dst, r.off)
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
			return moe.Weights{}, total, fmt.Errorf("expert: reading %v from %s (bytes %d-%d): %w (file truncated or changed under the runtime?)", e.key, s.path, r.off, r.off+need, err)
		}
	}
	part := func(i int) []byte { x := p.parts[i]; return buf[x.Off : x.Off+x.Len : x.Off+x.Len] }
	return moe.Weights{Gate: part(0), Up: part(1), Down: part(2)}, total, nil
}

// Use implements moe.Source. How reads and compute interleave depends on
// the mode; the experts used and their weights never do.
func (s *Store) Use(ctx context.Context, layer int, experts []int, fn func(int, moe.Weights) error) error {
	if layer < 0 || layer >= len(s.shapes) {
		return fmt.Errorf("expert: layer %d out of range [0, %d)", layer, len(s.shapes))
	}
	if len(experts) == 0 {
		return nil
	}
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
			s.unpinLocked(e)
		}
	}
	if s.oracle != nil && err == nil {
		s.oraclePrefetchLocked()
	}
	s.mu.Unlock()
	return err
}

// beginUseLocked validates the demand, updates statistics, settles the
// speculative reads issued for this layer and pins what is resident.
func (s *Store) beginUseLocked(layer int, experts []int, items []*entry) error {
	ls := &s.layerStats[layer]
	ls.Hits, ls.Misses, ls.PrefetchUsed, ls.PrefetchWasted, ls.Stall = 0, 0, 0, 0, 0
	s.useSeq++
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
	if s.rec != nil {
		s.rec.Calls = append(s.rec.Calls, TraceCall{Layer: layer, Experts: append([]int(nil), experts...)})
	}
	// Predictor quality.
	if p := s.predicted[layer]; s.hasPred[layer] {
		ps := &s.stats.PredLayers[layer]
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
	}
	s.stats.Uses++
	s.stats.Demanded += int64(len(experts))
	promoted := 0
	for i, k := range s.curDemand {
		s.policy.Access(k)
		e := s.entries[k]
		if e == nil {
			s.stats.Misses++
			ls.Misses++
			continue
		}
		items[i] = e
		e.pins++
		e.demandSeq = s.useSeq
		if e.state == stReady {
			s.stats.Hits++
			ls.Hits++
		} else {
			s.stats.Misses++
			ls.Misses++
		}
		if e.spec.Swap(false) {
			s.stats.PrefetchUsed++
			ls.PrefetchUsed++
		}
		if e.inSpecQ {
			s.removeFromQueue(&s.specQ, e)
			e.inSpecQ = false
			s.demandQ = append(s.demandQ, e)
			promoted++
		}
	}
	s.wakeWorkersLocked(promoted)
	// Speculative reads for this layer that were not demanded: cancel the
	// ones not started, count the rest as wasted.
	for _, e := range s.specFor[layer] {
		if !e.spec.Load() {
			continue
		}
		e.spec.Store(false)
		if e.inSpecQ {
			s.removeFromQueue(&s.specQ, e)
			e.inSpecQ = false
			delete(s.entries, e.key)
			s.releaseLocked(e)
			s.stats.PrefetchCancelled++
			continue
		}
		s.stats.PrefetchWasted++
		ls.PrefetchWasted++
	}
	clear(s.specFor[layer])
	s.specFor[layer] = s.specFor[layer][:0]
	if s.oracle != nil {
		if err := s.oracle.Err(); err != nil {
			for _, e := range items {
				if e != nil {
					s.unpinLocked(e)
				}
			}
			clear(items)
			return err
		}
	}
	return nil
}

func (s *Store) removeFromQueue(q *[]*entry, e *entry) {
	for i, x := range *q {
		if x == e {
			copy((*q)[i:], (*q)[i+1:])
			(*q)[len(*q)-1] = nil
			*q = (*q)[:len(*q)-1]
			return
		}
	}
}

func (s *Store) unpinLocked(e *entry) {
	e.pins--
	if e.pins == 0 && e.state == stFailed {
		s.releaseLocked(e)
	}
}

// run is the demand loop of Use: it issues the missing reads (one at a time
// in on-demand mode), and calls fn for experts as the mode's order allows.
func (s *Store) run(ctx context.Context, layer int, experts []int, items []*entry, done []bool, fn func(int, moe.Weights) error) error {
	mode := s.opts.Mode
	remaining := len(experts)
	ls := &s.layerStats[layer]
	for remaining > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		s.mu.Lock()
		if mode == OracleMode {
			s.oraclePrefetchLocked()
		}
		// Issue reads for experts that have no entry.
		inFlight, pending := 0, 0
		for i, e := range items {
			if e != nil && !done[i] && e.state != stReady && e.state != stFailed {
				inFlight++
			}
		}
		issued := 0
		for i, e := range items {
			if e != nil || done[i] {
				continue
			}
			if mode == OnDemand && (inFlight > 0 || !allDone(done[:i])) {
				pending++
				continue
			}
			k := Key{int32(layer), int32(experts[i])}
			if x := s.entries[k]; x != nil { // appeared meanwhile (oracle prefetch)
				x.pins++
				x.demandSeq = s.useSeq
				items[i] = x
				if x.state != stReady {
					inFlight++
				}
				continue
			}
			if s.plan != nil {
				pending++ // the oracle's plan reads it
				continue
			}
			buf, ok := s.allocLocked(s.bufSize[layer], s.evictable)
			if !ok && s.cancelQueuedSpecLocked() {
				buf, ok = s.allocLocked(s.bufSize[layer], s.evictable)
			}
			if !ok {
				pending++
				continue
			}
			ne := &entry{key: k, buf: buf, state: stQueued, pins: 1, demandSeq: s.useSeq}
			s.entries[k] = ne
			s.demandQ = append(s.demandQ, ne)
			items[i] = ne
			inFlight++
			issued++
		}
		s.wakeWorkersLocked(issued)
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
			if e == nil || e.state != stReady {
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
		ready := -1
		switch {
		case mode.readyFirst():
			ready = firstReady
		case mode == OnDemand:
			ready = inOrder
		case allReady:
			ready = inOrder
		}
		if ready < 0 && blocked {
			ready = firstReady // free budget by computing what is here
		}
		canCompute := ready >= 0
		if !canCompute && blocked && s.specFlight == 0 && len(s.specQ) == 0 && !s.anyReadingLocked() {
			if s.plan != nil {
				// The plan cannot go on (it diverged from the store):
				// serve demand with Belady eviction from here on.
				s.plan = nil
				s.log.Warn("expert: oracle: the plan stalled; continuing with Belady eviction on demand", "layer", layer)
				s.mu.Unlock()
				continue
			}
			s.mu.Unlock()
			return fmt.Errorf("expert: layer %d: budget %d bytes cannot hold the experts this step needs", layer, s.opts.Budget)
		}
		if canCompute {
			e := items[ready]
			w := e.w
			e.doneSeq = s.useSeq
			s.mu.Unlock()
			if err := fn(ready, w); err != nil {
				return err
			}
			s.mu.Lock()
			done[ready] = true
			remaining--
			s.unpinLocked(e)
			s.mu.Unlock()
			continue
		}
		s.mu.Unlock()
		t0 := time.Now()
		select {
		case <-s.wake:
		case <-ctx.Done():
			return ctx.Err()
		}
		d := time.Since(t0)
		s.mu.Lock()
		s.stats.Stall += d
		s.step.stall += d
		ls.Stall += d
		s.mu.Unlock()
	}
	return nil
}

// wakeWorkersLocked wakes up to n idle workers for n new jobs (not all of
// them: with 32 workers a broadcast per read costs more CPU than the reads).
func (s *Store) wakeWorkersLocked(n int) {
	for range n {
		s.work.Signal()
	}
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
	if len(s.specQ) == 0 {
		return false
	}
	if s.plan != nil {
		s.plan = nil // cancelled oracle reads: the schedule no longer matches
		s.log.Warn("expert: oracle: demand cancelled scheduled reads; continuing with Belady eviction on demand")
	}
	for _, e := range s.specQ {
		e.inSpecQ = false
		if e.spec.Swap(false) {
			s.stats.PrefetchCancelled++
		}
		if s.entries[e.key] == e {
			delete(s.entries, e.key)
		}
		s.releaseLocked(e)
	}
	clear(s.specQ)
	s.specQ = s.specQ[:0]
	return true
}

func (s *Store) anyReadingLocked() bool {
	if len(s.demandQ) > 0 {
		return true
	}
	for _, e := range s.entries {
		if e.state == stReading || e.state == stQueued {
			return true
		}
	}
	return false
}

// oraclePrefetchLocked issues the oracle plan's reads in order, each as
// soon as its victims have had their last use before it and are evictable.
func (s *Store) oraclePrefetchLocked() {
	if s.plan == nil {
		return
	}
	queued := 0
	defer func() { s.wakeWorkersLocked(queued) }()
	for s.planNext < len(s.plan.fetches) {
		f := &s.plan.fetches[s.planNext]
		if f.after >= s.oracle.pos {
			return // a victim is still to be demanded
		}
		for _, v := range f.victims {
			if e := s.entries[v]; e != nil && !s.evictable(e) {
				return // still being computed
			}
		}
		for _, v := range f.victims {
			if e := s.entries[v]; e != nil {
				s.evictLocked(e)
			}
		}
		if _, ok := s.entries[f.key]; ok {
			s.planNext++
			continue
		}
		buf, ok := s.allocLocked(s.bufSize[f.key.Layer], func(*entry) bool { return false })
		if !ok {
			// The store holds more than the plan says (it diverged):
			// serve demand with Belady eviction from here on.
			s.plan = nil
			s.log.Warn("expert: oracle: budget does not match the plan; continuing with Belady eviction on demand")
			return
		}
		e := &entry{key: f.key, buf: buf, state: stQueued, target: int(f.key.Layer), inSpecQ: true}
		s.entries[f.key] = e
		s.specQ = append(s.specQ, e)
		queued++
		s.planNext++
	}
}

// LayerStats returns what the latest Use of layer measured.
func (s *Store) LayerStats(layer int) LayerStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	ls := s.layerStats[layer]
	ls.Predicted = append([]int(nil), ls.Predicted...)
	return ls
}
