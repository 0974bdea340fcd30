package expert

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
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
	// LayerBudgets, if set, fixes each layer's share of Budget in bytes
	// (the "layered" policy with these quotas); they must sum to at most
	// Budget.
	LayerBudgets []int64
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
	// PrefetchAll makes the lookahead modes prefetch every prediction the
	// budget allows, without weighing its measured precision against the
	// read and the eviction it costs (prefetchGate); for comparison.
	PrefetchAll bool
	// NoLookahead turns the lookahead modes' prediction and prefetch off
	// (a runtime kill switch, e.g. for a device class whose flash cannot
	// afford speculative reads): they read only demanded experts, and
	// scheduled keeps its ready-first compute (withoutLookahead).
	NoLookahead bool
	// Trace is the recorded routing the oracle mode replays.
	Trace *RoutingTrace
	// Record makes the store record its routing (Meter.Recorded).
	Record bool
	// DeviceTime runs the emulated flash on a clock dilated to the
	// profile's compute speed and accounts decode in device time
	// (deviceclock.go); it needs a Profile with a Compute section.
	DeviceTime bool
	// Costs are the non-expert compute costs for device time; Open derives
	// them from the model file.
	Costs *ComputeCosts
	// ComputeSlowdown, when above 1, adds busy work to every timed compute
	// segment so it takes that many times as long: a test hook showing
	// that device time does not depend on the host's speed.
	ComputeSlowdown float64
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
//
// Store composes parts cut by responsibility, each in its own file:
//   - the cache (cache.go): the expert entries, the byte budget and its
//     policy (budget.go, policy*.go); the naive mode caches pages instead
//     (pageCache, pagecache.go);
//   - the reader (reader.go): the storage strategy — the file, direct or
//     buffered (fileReader), an emulated flash (flashReader), or the naive
//     mode's page faults (faultReader, naive.go);
//   - the read queue (readqueue.go): demand and speculative classes and
//     the workers that call the reader;
//   - the mode's strategy (strategy.go): prefetch, read order and compute
//     order (and, for the oracle, the replayed plan);
//   - the device clock (deviceclock.go), under device time;
//   - the statistics (Meter, meter.go).
//
// Its lock guards the cache, the queue, the strategy, the clock and the
// statistics; the file and flash readers need none, and the faultReader
// takes it around its page cache.
type Store struct {
	opts    Options
	path    string
	layout  Layout
	shapes  []moe.LayerShape
	bufSize []int64 // per layer: buffer bytes per expert
	model   TraceModel
	file    *fileReader // the model file (the reader's, and Info's)
	rd      reader      // the storage strategy (reader.go)
	procs   func()      // gives back the Ps lent to throttled workers
	log     *slog.Logger

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc

	mu     sync.Mutex
	cache  *cache     // the cache modes' experts (cache.go)
	pages  *pageCache // the naive mode's pages, or nil
	q      *readQueue
	strat  strategy
	closed bool

	curDemand []Key
	predicted [][]int
	hasPred   []bool
	specFor   [][]*entry    // per target layer: speculative entries issued for it
	meter     Meter         // the statistics (meter.go)
	clock     *DeviceClock  // device time, or nil
	gate      *prefetchGate // nil: prefetch every prediction
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
	inSpecQ   bool   // queued in the speculative class (not started)
	issued    bool   // its read was queued
	// devDone is when the read completes on the device clock (device
	// time only).
	devDone time.Duration
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
	if opts.Mode < OnDemand || opts.Mode > Naive {
		return nil, fmt.Errorf("expert: invalid mode %d", opts.Mode)
	}
	if opts.Mode == OracleMode && (opts.Trace == nil || len(opts.Trace.Calls) == 0) {
		return nil, errors.New("expert: the oracle mode needs a recorded routing trace (run once with recording first)")
	}
	opts.Logger = cmp.Or(opts.Logger, slog.Default())
	// Under device time a measured table models the device's concurrency
	// itself (deviceflash.go), so the store keeps its own worker count, as
	// on real storage; otherwise the profile's reads in flight.
	if opts.Workers == 0 && opts.Profile != nil && !(opts.DeviceTime && opts.Profile.Service != nil) {
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
	switch {
	case opts.Mode == OracleMode:
		oracle = NewOracle(opts.Trace)
		policy = oracle
	case opts.LayerBudgets != nil:
		if opts.Policy != "" && opts.Policy != "layered" {
			return nil, fmt.Errorf("expert: per-layer budgets need the layered policy, not %q", opts.Policy)
		}
		policy = NewLayeredPolicy(opts.LayerBudgets)
	default:
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
		opts: opts, path: path, layout: layout, shapes: shapes,
		log: opts.Logger, cache: newCache(opts.Budget, policy),
		predicted: make([][]int, len(shapes)),
		hasPred:   make([]bool, len(shapes)),
		specFor:   make([][]*entry, len(shapes)),
	}
	s.file = &fileReader{f: f, path: path, direct: direct, align: 1, layout: layout, io: &s.meter.io}
	s.rd = s.file
	s.meter.init(&s.mu, len(shapes), s.gaugesLocked)
	s.model.Layers = make([]TraceLayer, len(shapes))
	for l, sh := range shapes {
		if sh.Experts > 0 {
			s.model.Layers[l] = TraceLayer{Experts: sh.Experts, ExpertBytes: sh.Bytes()}
		}
	}
	// An emulated device reads whole blocks as direct storage does, so a
	// profile (a twin of this host's disk, or a phone's flash) reads and
	// caches the bytes a direct store would: the same padded reads, the
	// same entries within the budget.
	if direct || opts.Profile != nil {
		s.file.align = directAlign
	}
	if opts.Record {
		s.meter.rec = &RoutingTrace{}
	}
	if s.clock, err = newClock(&opts, shapes, &s.mu); err != nil {
		f.Close()
		return nil, err
	}
	s.meter.clock = s.clock
	s.cache.clock = s.clock
	var flash *flashReader
	if opts.Profile != nil && s.clock == nil { // the device clock emulates the flash itself
		flash = &flashReader{fileReader: s.file, throttle: NewThrottle(opts.Profile)}
		s.rd = flash
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
			s.bufSize[l] = max(s.bufSize[l], planRead(parts, s.file.align).size)
		}
		maxSize = max(maxSize, s.bufSize[l])
	}
	if opts.Budget < maxSize {
		f.Close()
		return nil, fmt.Errorf("%w: budget %d bytes, one expert needs %d bytes", ErrBudgetTooSmall, opts.Budget, maxSize)
	}
	if err := configurePolicy(policy, opts.Budget, s.bufSize); err != nil {
		f.Close()
		return nil, err
	}
	if opts.Mode == Naive {
		fr, err := newFaultReader(opts.Profile, path, opts.Budget, maxSize, st.Size(), s.rd.(pager))
		if err != nil {
			f.Close()
			return nil, err
		}
		fr.mu, fr.layout, fr.onRun = &s.mu, layout, s.pagesRead
		s.pages, s.rd = fr.pages, fr
	}
	var plan *OraclePlan
	if oracle != nil {
		plan, err = oracle.Plan(func(k Key) int64 { return s.bufSize[k.Layer] }, opts.Budget)
		if err != nil {
			f.Close()
			return nil, err
		}
	}
	s.strat = newStrategy(opts.Mode, oracle, plan)
	if opts.NoLookahead || LookaheadCompiledOut() {
		s.strat = withoutLookahead{s.strat}
	}
	if s.strat.speculative() && !opts.PrefetchAll {
		s.gate = newPrefetchGate(len(shapes), opts.PredictK)
	}
	emulated := flash != nil || s.clock != nil
	s.q = newReadQueue(&s.mu, opts.SpecInFlight, emulated || oracle != nil, emulated)
	s.q.onPush = s.issuedLocked
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if flash != nil || direct {
		// Workers block in nanosleep (emulated device) or in O_DIRECT
		// preads (real device); either way a blocked worker keeps its P
		// until sysmon takes it back, and the model goroutine it woke
		// waits for a P (reserveSleepProcs).
		s.procs = reserveSleepProcs(opts.Workers)
	}
	s.q.start(opts.Workers, s, flash != nil)
	return s, nil
}

// Clone opens another store over the same file, layout and shapes with
// different options (e.g. another mode), so a recorded run can be replayed.
func (s *Store) Clone(opts Options) (*Store, error) {
	if opts.PredictK == 0 {
		opts.PredictK = s.opts.PredictK
	}
	if opts.Costs == nil {
		opts.Costs = s.opts.Costs
	}
	c, err := New(s.path, s.layout, s.shapes, opts)
	if err != nil {
		return nil, err
	}
	c.model = s.model
	return c, nil
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
	s.q.closeLocked()
	s.mu.Unlock()
	s.cancel()
	s.q.wait()
	if s.procs != nil {
		s.procs()
	}
	return s.file.f.Close()
}

// PredictK implements moe.Source.
func (s *Store) PredictK() int {
	if s.strat.speculative() {
		return s.opts.PredictK
	}
	return 0
}

// gaugesLocked returns the bytes of experts resident now (and of the
// naive mode's cached pages) and the most bytes held (Stats.CacheBytes and
// PeakBytes).
func (s *Store) gaugesLocked() (cache, peak int64) {
	cache, peak = s.cache.residentBytes(), s.cache.budget.peak
	if s.pages != nil {
		cache += s.pages.used
		peak = max(peak, s.pages.peak)
	}
	return cache, peak
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
	if s.meter.rec != nil {
		s.meter.rec.Calls = append(s.meter.rec.Calls, TraceCall{Layer: layer, Experts: append([]int(nil), experts...), Prefetch: true})
	}
	s.meter.layers[layer].Predicted = append(s.meter.layers[layer].Predicted[:0], experts...)
	if !s.strat.speculative() || s.closed {
		return
	}
	if s.clock != nil {
		s.clock.gapCharge(layer - 1) // predicted after layer-1's attention
	}
	queued := 0
	// One token's predictions come in rank order; a union (prefill) has
	// no ranks and is not gated.
	ranked := len(experts) <= s.opts.PredictK
	specOK := func(e *entry) bool { return s.cache.specEvictable(e, layer) }
	for rank, x := range experts {
		if x < 0 || x >= s.shapes[layer].Experts {
			continue
		}
		k := Key{int32(layer), int32(x)}
		if _, ok := s.cache.entries[k]; ok {
			continue
		}
		if s.gate != nil && ranked {
			q := 0.0
			if s.cache.budget.used+s.bufSize[layer] > s.cache.budget.limit {
				v, ok := s.cache.policy().Victim(func(k Key) bool { e := s.cache.entries[k]; return e != nil && specOK(e) })
				if !ok {
					break
				}
				q = s.gate.reuse(v)
			}
			if !s.gate.worth(layer, rank, q) {
				s.meter.stats.PrefetchSkipped++
				continue
			}
		}
		buf, ok := s.cache.alloc(s.bufSize[layer], specOK)
		if !ok {
			break
		}
		e := &entry{key: k, buf: buf, state: stQueued, wasSpec: true, target: layer}
		e.spec.Store(true)
		s.cache.entries[k] = e
		s.q.pushSpecLocked(e)
		s.specFor[layer] = append(s.specFor[layer], e)
		s.meter.stats.PrefetchIssued++
		queued++
	}
	s.q.wakeLocked(queued)
}
