// Package loadtest drives a coordinator with many simulated agents and
// measures it: assignments per second, assignment latency (trigger →
// assign, result → next assign), telemetry samples ingested per second,
// ingest lag, the coordinators' RSS and CPU, and every sample lost or
// duplicated, counted against what the agents sent.
//
// A simulated agent runs no model. It speaks the real protocol over its own
// NATS connection with its own device credential: hello and heartbeats,
// signed assignments verified and acknowledged, per-token telemetry in
// batches of the agent's default shape (one sample per decode step with
// per-layer expert counts, cut every BatchInterval) and one result per run,
// on the device-scoped JetStream subjects.
//
// The workload: every agent starts idle, then Agents runs are triggered one
// by one (each one's trigger → assign latency is measured from just before
// its trigger call: a fanout burst onto an idle fleet). From then on the
// queue is topped up so that Surplus runs wait beyond one per agent, so an
// agent that publishes a result always finds work: result → next assign is
// the coordinator's own turnaround (result ingest, placement, the signed
// push and its ack). After Duration no more runs are triggered; the agents
// drain the queue, and the check waits until every run succeeded and every
// sample is stored.
package loadtest

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/jobs"
	"github.com/lesfarm/lesfarm/protocol"
)

// LabelKey is the device label every simulated agent carries (its value is
// the session id), and the only label the load test's runs select, so they
// never go to real devices sharing the farm.
const LabelKey = "loadtest"

// Config configures a load run. Store, NATSURL, Agents and Duration are
// required; zero values of the rest take the defaults.
type Config struct {
	// Agents is the number of simulated agents (1..20000).
	Agents int
	// Duration is how long runs are triggered.
	Duration time.Duration
	// NATSURL is the NATS the coordinators serve (agents connect to it
	// with their device credentials); NATSOptions are extra client
	// options (TLS roots, more servers).
	NATSURL     string
	NATSOptions []nats.Option
	// Store is the farm's database: device credentials are created in it,
	// runs triggered through it, and lost and duplicated samples counted
	// in it.
	Store *store.Store
	// MetricsURLs are the coordinators' Prometheus endpoints (/metrics),
	// scraped for RSS, CPU and ingested samples; empty leaves those out.
	MetricsURLs []string
	// SamplesPerSecond is each busy agent's telemetry rate (default 100: a
	// phone decoding 100 tokens/s, or several configs' prefill).
	SamplesPerSecond float64
	// Layers is the per-layer detail of each sample (default 48, the
	// layers of qwen3moe 30B-A3B).
	Layers int
	// BatchInterval cuts telemetry batches (default 500ms, the agent's).
	BatchInterval time.Duration
	// RunLength is how long one simulated run streams telemetry (default
	// 5s).
	RunLength time.Duration
	// Surplus is how many runs are kept queued beyond one per agent
	// (default Agents/10, at least 4).
	Surplus int
	// DrainTimeout bounds the wait, after Duration, for the queue to drain
	// and every sample to be stored (default 2m).
	DrainTimeout time.Duration
	// DatabaseCPU, when set, reads the database's CPU time so far (false:
	// unknown); the report gives its cores over the window.
	DatabaseCPU func() (time.Duration, bool)
	// ScrapeInterval is the metrics sampling period (default 250ms).
	ScrapeInterval time.Duration
	Logger         *slog.Logger

	// SamplesPerBatch is derived: SamplesPerSecond × BatchInterval.
	SamplesPerBatch int
}

func (c *Config) setDefaults() error {
	c.SamplesPerSecond = cmp.Or(c.SamplesPerSecond, 100)
	c.Layers = cmp.Or(c.Layers, 48)
	c.BatchInterval = cmp.Or(c.BatchInterval, 500*time.Millisecond)
	c.RunLength = cmp.Or(c.RunLength, 5*time.Second)
	c.Surplus = cmp.Or(c.Surplus, max(4, c.Agents/10))
	c.DrainTimeout = cmp.Or(c.DrainTimeout, 2*time.Minute)
	c.ScrapeInterval = cmp.Or(c.ScrapeInterval, 250*time.Millisecond)
	c.Logger = cmp.Or(c.Logger, slog.Default())
	c.SamplesPerBatch = int(math.Round(c.SamplesPerSecond * c.BatchInterval.Seconds()))
	switch {
	case c.Store == nil || c.NATSURL == "":
		return errors.New("loadtest config: Store and NATSURL are required")
	case c.Agents < 1 || c.Agents > 20000:
		return fmt.Errorf("loadtest config: agents %d out of range [1, 20000]", c.Agents)
	case c.Duration <= 0:
		return fmt.Errorf("loadtest config: duration %s must be positive", c.Duration)
	case c.SamplesPerBatch < 1 || c.SamplesPerBatch > protocol.MaxSamplesPerBatch:
		return fmt.Errorf("loadtest config: %g samples/s × %s batches = %d samples per batch, want 1..%d",
			c.SamplesPerSecond, c.BatchInterval, c.SamplesPerBatch, protocol.MaxSamplesPerBatch)
	case c.Layers < 0 || c.Layers > protocol.MaxLayers:
		return fmt.Errorf("loadtest config: layers %d out of range [0, %d]", c.Layers, protocol.MaxLayers)
	case c.RunLength < c.BatchInterval:
		return fmt.Errorf("loadtest config: run length %s is shorter than one batch interval %s", c.RunLength, c.BatchInterval)
	case c.Surplus < 1:
		return errors.New("loadtest config: surplus must be positive")
	}
	return nil
}

// loadRun is the shared state of one Run.
type loadRun struct {
	cfg           Config
	session       string
	template      json.RawMessage
	batchesPerRun int
	over          chan struct{}

	samplesSent, publishRetries, heartbeatErrors, cancelled, badAssignments, reconnects atomic.Int64

	mu          sync.Mutex
	triggeredAt map[int64]time.Time // burst runs: before their trigger call
	assignedAt  map[int64]time.Time
	next        []time.Duration
	// reassigned are the runs an agent was assigned after another one had
	// been (or the same one again).
	reassigned map[int64]bool
	// sent is what each attempt (run, token) sent, noted with its result.
	sent map[attempt]int64
	// reported are the runs with a result published (any attempt).
	reported   map[int64]bool
	windowEnd  time.Time
	inWindow   int
	resultWake chan struct{}
	errs       []error
}

func (lt *loadRun) fail(err error) {
	lt.mu.Lock()
	if len(lt.errs) < 8 {
		lt.errs = append(lt.errs, err)
	}
	lt.mu.Unlock()
}

func (lt *loadRun) noteAssigned(a *simAgent, run int64, at time.Time) {
	a.mu.Lock()
	last := a.lastResult
	a.lastResult = time.Time{}
	a.mu.Unlock()
	lt.mu.Lock()
	defer lt.mu.Unlock()
	if _, dup := lt.assignedAt[run]; dup {
		lt.reassigned[run] = true
		return
	}
	lt.assignedAt[run] = at
	if lt.windowEnd.IsZero() || at.Before(lt.windowEnd) {
		lt.inWindow++
	}
	if !last.IsZero() && (lt.windowEnd.IsZero() || last.Before(lt.windowEnd)) {
		lt.next = append(lt.next, at.Sub(last))
	}
}

func (lt *loadRun) noteSent(run, token, samples int64) {
	lt.mu.Lock()
	lt.sent[attempt{run, token}] = samples
	lt.mu.Unlock()
}

func (lt *loadRun) noteResult(a *simAgent, run int64, at time.Time) {
	a.mu.Lock()
	a.lastResult = at
	a.mu.Unlock()
	lt.mu.Lock()
	lt.reported[run] = true
	lt.mu.Unlock()
	select {
	case lt.resultWake <- struct{}{}:
	default:
	}
}

// Run runs the load test and returns its report. An error means the test
// could not run (or its checks could not be made); lost or duplicated
// samples are in the report (see Report.OK).
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	var sb [4]byte
	_, _ = rand.Read(sb[:])
	lt := &loadRun{cfg: cfg, session: hex.EncodeToString(sb[:]), over: make(chan struct{}),
		triggeredAt: map[int64]time.Time{}, assignedAt: map[int64]time.Time{}, sent: map[attempt]int64{},
		reassigned: map[int64]bool{}, reported: map[int64]bool{},
		resultWake: make(chan struct{}, 1), batchesPerRun: int(cfg.RunLength / cfg.BatchInterval)}
	log := cfg.Logger.With("session", lt.session)
	spec, err := jobs.Builtin("smoke")
	if err != nil {
		return nil, err
	}
	spec.Name, spec.Suite, spec.Description = "loadtest", "loadtest", "lesfarm loadtest: simulated agents, no runtime"
	spec.Devices = jobs.Selector{Labels: map[string]string{LabelKey: lt.session}}
	if lt.template, err = sampleTemplate(cfg.SamplesPerBatch, cfg.Layers, len(spec.Expand())); err != nil {
		return nil, fmt.Errorf("loadtest: telemetry template: %w", err)
	}
	batchBytes := len(appendBatch(nil, 1<<40, 1<<40, "lt-"+lt.session+"-00000", 1<<20, lt.template))
	if batchBytes > protocol.MaxTelemetryBytes {
		return nil, fmt.Errorf("loadtest: a telemetry batch of %d samples × %d layers is %d bytes, over the %d limit",
			cfg.SamplesPerBatch, cfg.Layers, batchBytes, protocol.MaxTelemetryBytes)
	}

	agents, creds, err := lt.makeAgents(ctx)
	defer func() {
		for _, a := range agents {
			a.close()
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		for _, id := range creds {
			_, _ = cfg.Store.RevokeDeviceCredential(rctx, id)
		}
	}()
	if err != nil {
		return nil, err
	}
	actx, stopAgents := context.WithCancel(ctx)
	defer stopAgents()
	if err := lt.start(actx, agents); err != nil {
		return nil, err
	}
	log.Info("loadtest: agents connected", "agents", len(agents))

	scr := newScraper(cfg.MetricsURLs, cfg.ScrapeInterval, lt.samplesSent.Load)
	scrCtx, stopScrape := context.WithCancel(ctx)
	scrDone := make(chan struct{})
	cpu0 := processCPU()
	db0, dbOK0 := lt.databaseCPU()
	start := time.Now()
	go func() { defer close(scrDone); scr.run(scrCtx) }()

	runIDs, err := lt.trigger(ctx, spec, start.Add(cfg.Duration))
	windowEnd := time.Now()
	cpu1 := processCPU()
	db1, dbOK1 := lt.databaseCPU()
	lt.mu.Lock()
	lt.windowEnd = windowEnd
	inWindow := lt.inWindow
	lt.mu.Unlock()
	sentInWindow := lt.samplesSent.Load()
	scr.mark(windowEnd)
	if err != nil {
		stopScrape()
		<-scrDone
		return nil, err
	}
	log.Info("loadtest: window over, draining", "runs", len(runIDs))

	// Drain: every triggered run reports, then every sample is stored.
	drainCtx, cancel := context.WithTimeout(ctx, cfg.DrainTimeout)
	defer cancel()
	for {
		lt.mu.Lock()
		done := len(lt.reported) >= len(runIDs)
		lt.mu.Unlock()
		if done || drainCtx.Err() != nil {
			break
		}
		select {
		case <-lt.resultWake:
		case <-drainCtx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
	lastSent := time.Now()
	close(lt.over)
	stored, ends, drainErr := lt.awaitStored(drainCtx, runIDs)
	drained := time.Now()
	stopScrape()
	<-scrDone

	rep := &Report{Session: lt.session, Agents: cfg.Agents, DurationS: windowEnd.Sub(start).Seconds(), LoadAvg: loadAvg(),
		Runs: len(runIDs), Assignments: inWindow, SamplesPerBatch: cfg.SamplesPerBatch, Layers: cfg.Layers, BatchBytes: batchBytes,
		SamplesSent: lt.samplesSent.Load(), PublishRetries: lt.publishRetries.Load(), HeartbeatErrors: lt.heartbeatErrors.Load(),
		Cancelled: lt.cancelled.Load(), Reconnects: lt.reconnects.Load(), DrainS: drained.Sub(lastSent).Seconds()}
	win := rep.DurationS
	rep.AssignmentsPerS = float64(inWindow) / win
	rep.SentPerS = float64(sentInWindow) / win
	rep.LoadgenCPUCores = (cpu1 - cpu0).Seconds() / win
	if dbOK0 && dbOK1 {
		rep.DatabaseCPUCores = math.Round((db1-db0).Seconds()/win*100) / 100
	}
	lt.mu.Lock()
	var first []time.Duration
	for run, t0 := range lt.triggeredAt {
		if at, ok := lt.assignedAt[run]; ok {
			first = append(first, at.Sub(t0))
		}
	}
	rep.TriggerToAssign = summarize(first)
	rep.ResultToNext = summarize(lt.next)
	sent := maps.Clone(lt.sent)
	reassigned := maps.Clone(lt.reassigned)
	errs := lt.errs
	lt.mu.Unlock()
	t := tally(sent, ends, stored, reassigned, settled(sent, ends, stored))
	rep.SamplesStored, rep.LostSamples, rep.DuplicatedSamples = t.stored, t.lost, t.dup
	rep.DuplicatedAssignments, rep.FailedRuns, rep.UnfinishedRuns, rep.UnfinishedSamples = t.reassigned, t.failed, t.unfinished, t.unfinishedSamples
	rep.SupersededAttempts, rep.SupersededSamples = t.superseded, t.supersededSamples
	scr.fill(rep, windowEnd)
	if drainErr != nil {
		errs = append(errs, drainErr)
	}
	if len(errs) > 0 {
		return rep, errors.Join(errs...)
	}
	return rep, nil
}

func (lt *loadRun) databaseCPU() (time.Duration, bool) {
	if lt.cfg.DatabaseCPU == nil {
		return 0, false
	}
	return lt.cfg.DatabaseCPU()
}

// makeAgents creates a device credential for each agent and connects it.
func (lt *loadRun) makeAgents(ctx context.Context) ([]*simAgent, []int64, error) {
	n := lt.cfg.Agents
	agents := make([]*simAgent, n)
	creds := make([]int64, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			id := fmt.Sprintf("lt-%s-%05d", lt.session, i)
			secret, cred, err := lt.cfg.Store.CreateDeviceCredential(ctx, id)
			if err != nil {
				errs[i] = err
				return
			}
			creds[i] = cred.ID
			a := newSimAgent(lt, id, secret)
			errs[i] = a.connect()
			agents[i] = a
		}()
	}
	wg.Wait()
	var live []*simAgent
	for _, a := range agents {
		if a != nil {
			live = append(live, a)
		}
	}
	var ids []int64
	for _, id := range creds {
		if id != 0 {
			ids = append(ids, id)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return live, ids, fmt.Errorf("loadtest: agents: %w", err)
	}
	return live, ids, nil
}

// start says hello for every agent and starts their heartbeats and loops.
func (lt *loadRun) start(ctx context.Context, agents []*simAgent) error {
	errs := make([]error, len(agents))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for i, a := range agents {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			hctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			every, err := a.hello(hctx)
			cancel()
			if err != nil {
				errs[i] = err
				return
			}
			go a.heartbeats(ctx, every)
			go a.loop(ctx)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("loadtest: hello: %w", err)
	}
	return nil
}

// burstWorkers is how many trigger calls of the initial burst are in
// flight at once.
const burstWorkers = 8

// trigger creates the burst of one run per agent, then keeps Surplus runs
// queued until end. It returns every run it created.
func (lt *loadRun) trigger(ctx context.Context, spec *jobs.Spec, end time.Time) ([]int64, error) {
	var (
		idsMu sync.Mutex
		ids   []int64
	)
	create := func(burst bool) error {
		t0 := time.Now()
		_, runs, err := lt.cfg.Store.CreateRuns(ctx, &store.CreateRunsParams{Spec: spec, Build: "loadtest-" + lt.session, Source: "loadtest"})
		if err != nil {
			return fmt.Errorf("loadtest: trigger: %w", err)
		}
		idsMu.Lock()
		defer idsMu.Unlock()
		for _, r := range runs {
			ids = append(ids, r.ID)
			if burst {
				lt.mu.Lock()
				lt.triggeredAt[r.ID] = t0
				lt.mu.Unlock()
			}
		}
		return nil
	}
	// The burst: one trigger call per agent, BurstWorkers at a time (a
	// CI fanning a suite out, several triggers in flight).
	burst := make(chan struct{})
	var wg sync.WaitGroup
	errs := make([]error, burstWorkers)
	for w := range burstWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range burst {
				if err := create(true); err != nil && errs[w] == nil {
					errs[w] = err
				}
			}
		}()
	}
	for range lt.cfg.Agents {
		if time.Now().After(end) || ctx.Err() != nil {
			break
		}
		burst <- struct{}{}
	}
	close(burst)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return ids, err
	}
	// The top-up: burstWorkers trigger calls in flight, so the queue is
	// refilled as fast as results free agents. One call at a time (each a
	// transaction on the loaded database) let the queue run dry at 1,000
	// agents: result → next then measured the trigger, not the
	// coordinator.
	var inFlight int // top-up calls under way, under idsMu
	topUp := func() error {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for time.Now().Before(end) {
			idsMu.Lock()
			lt.mu.Lock()
			outstanding := len(ids) + inFlight - len(lt.reported)
			lt.mu.Unlock()
			need := outstanding < lt.cfg.Agents+lt.cfg.Surplus
			if need {
				inFlight++
			}
			idsMu.Unlock()
			if need {
				err := create(false)
				idsMu.Lock()
				inFlight--
				idsMu.Unlock()
				if err != nil {
					return err
				}
				continue
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-lt.resultWake:
			case <-tick.C:
			}
		}
		return nil
	}
	for w := range burstWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[w] = topUp()
		}()
	}
	wg.Wait()
	return ids, errors.Join(errs...)
}

// awaitStored waits until every run is finished in the database and each
// succeeded run stores what its current attempt sent (or ctx ends: then
// the runs still active are reported unfinished), and returns the stored
// counts and the runs' final states.
func (lt *loadRun) awaitStored(ctx context.Context, ids []int64) (map[int64]int64, map[int64]runEnd, error) {
	read := func(ctx context.Context) (map[int64]int64, map[int64]runEnd, error) {
		stored, err := lt.cfg.Store.CountSamplesByRun(ctx, ids)
		if err != nil {
			return nil, nil, fmt.Errorf("loadtest: count samples: %w", err)
		}
		ends := make(map[int64]runEnd, len(ids))
		for chunk := range slices.Chunk(ids, 5000) {
			runs, err := lt.cfg.Store.RunsByIDs(ctx, chunk)
			if err != nil {
				return nil, nil, fmt.Errorf("loadtest: runs: %w", err)
			}
			for _, r := range runs {
				ends[r.ID] = runEnd{state: r.State, token: r.Token, attempts: r.Attempts}
			}
		}
		return stored, ends, nil
	}
	for {
		stored, ends, err := read(ctx)
		if err != nil && ctx.Err() == nil {
			return nil, nil, err
		}
		if err == nil {
			lt.mu.Lock()
			done := settled(lt.sent, ends, stored)
			lt.mu.Unlock()
			if done {
				return stored, ends, nil
			}
		}
		if ctx.Err() != nil {
			// The final figures, read with a fresh context.
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			defer cancel()
			if stored, ends, err = read(fctx); err != nil {
				return nil, nil, err
			}
			n := 0
			for _, e := range ends {
				if !store.TerminalState(e.state) {
					n++
				}
			}
			return stored, ends, fmt.Errorf("loadtest: not drained within %s: %d runs unfinished (a throughput bound, counted apart from lost samples)", lt.cfg.DrainTimeout, n)
		}
		sleepCtx(ctx, 250*time.Millisecond)
	}
}
