// Package dispatch is the coordinator's placement engine: it gives queued
// runs to idle devices, pushes the signed assignments and records the
// agents' answers, frees the devices that results and cancellations end,
// and keeps devices alive or declares them lost.
//
// A Dispatcher answers the devices' hello and heartbeat requests (liveness:
// one timer per device, nomad style, with a sweep as the safety net for
// devices whose timer lived in a coordinator that died), runs the placement
// passes (a full round over every idle device on wake-ups and ticks, and a
// pass over the devices results just freed), sends each grant to its agent
// and commits the acknowledgements in groups. The pure ordering of runs for
// a device is coordinator/scheduler's; every read and write is
// coordinator/store's, which arbitrates between coordinators sharing one
// database with row locks, conditional updates and fencing tokens.
//
// Its exported surface is small: Wake (a full round soon), Freed (a
// result freed a device), Notice (a run changed in the database),
// CompleteRuns (commit results and place the devices they free), CancelRun
// (push a cancellation), and Start/Stop.
package dispatch

import (
	"cmp"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/lesfarm/lesfarm/coordinator/scheduler"
	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/protocol"
)

// QueueGroup is the NATS queue group coordinators share for device
// requests, so each hello or heartbeat is handled by one coordinator.
const QueueGroup = "lesfarm-coordinators"

// Config configures a Dispatcher. Store, NATS and SigningKey are
// required; the zero value of every other field picks a default.
type Config struct {
	Store *store.Store
	NATS  *nats.Conn
	// SigningKey signs the assignments (store.SigningKey).
	SigningKey ed25519.PrivateKey
	// Name identifies this coordinator in leases and logs.
	Name string
	// HeartbeatTTL is the device TTL sent in HelloReply (default 15s);
	// LeaseTTL how long a lease lasts without renewal (default
	// HeartbeatTTL); LostGrace is added to the TTL before a device is
	// declared lost (default 1s).
	HeartbeatTTL, LeaseTTL, LostGrace time.Duration
	// QueueTimeout ends a run queued this long (default 24h; negative:
	// never).
	QueueTimeout time.Duration
	// AssignTimeout bounds the wait for an agent's assignment reply
	// (default 5s).
	AssignTimeout time.Duration
	// Interval is the placement tick (default 500ms); placement also runs
	// on wake-ups.
	Interval time.Duration
	// Workers places on this many devices concurrently (default 4).
	Workers int
	// SweepInterval is the period of the lease, timeout and lost-device
	// sweeps (default 1s).
	SweepInterval time.Duration
	// ArtifactBaseURL is the base URL agents download artifacts from, and
	// ArtifactDir the artifact store (model facts of artifacts stored
	// before uploads were analysed are read from it).
	ArtifactBaseURL, ArtifactDir string
	// FarmUnhealthy says why the farm cannot take reports now or could
	// not recently (nil: it could); runs that time out meanwhile end as
	// infrastructure failures. Nil means always healthy.
	FarmUnhealthy func() error
	// Rejects counts rejected device requests; nil means a private counter.
	Rejects *protocol.RejectCounter
	Logger  *slog.Logger
}

// Dispatcher places runs on devices and keeps devices alive. It is
// started once; its methods are safe for concurrent use.
type Dispatcher struct {
	cfg     Config
	log     *slog.Logger
	store   *store.Store
	nc      *nats.Conn
	rejects *protocol.RejectCounter
	signKey ed25519.PrivateKey
	signPub ed25519.PublicKey

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	sendWG sync.WaitGroup
	subs   []*nats.Subscription
	sem    chan struct{}
	// embedded remembers the embedded builds this coordinator registered
	// (liveness.go registerEmbedded), keyed by id, platform and sha256.
	embedded sync.Map
	wake     chan struct{}
	// wakeFreedCh wakes freedLoop; reserved are the runs picked by a pass
	// in progress (the full and the freed passes run concurrently).
	wakeFreedCh chan struct{}
	reserved    *reservations
	work        *dispatchWork
	acks        *acker

	timersMu sync.Mutex
	timers   map[string]*time.Timer
	stopping bool

	db            *dbHealth
	limits        *deviceLimiter
	logs          *logLimiter
	sweeps        atomic.Uint64
	assignLatency latency
	phases        *phases
	facts         factsCache
	stopOnce      sync.Once
}

// New validates cfg, applies defaults and returns a Dispatcher ready to
// Start. cfg must not be reused afterwards.
func New(cfg Config) (*Dispatcher, error) {
	if cfg.Store == nil || cfg.NATS == nil || cfg.SigningKey == nil {
		return nil, errors.New("dispatch config: Store, NATS and SigningKey are required")
	}
	cfg.HeartbeatTTL = cmp.Or(cfg.HeartbeatTTL, 15*time.Second)
	cfg.LeaseTTL = cmp.Or(cfg.LeaseTTL, cfg.HeartbeatTTL)
	cfg.LostGrace = cmp.Or(cfg.LostGrace, time.Second)
	cfg.QueueTimeout = cmp.Or(cfg.QueueTimeout, 24*time.Hour)
	cfg.AssignTimeout = cmp.Or(cfg.AssignTimeout, 5*time.Second)
	cfg.Interval = cmp.Or(cfg.Interval, 500*time.Millisecond)
	cfg.Workers = cmp.Or(cfg.Workers, 4)
	cfg.SweepInterval = cmp.Or(cfg.SweepInterval, time.Second)
	if cfg.Workers < 1 {
		return nil, fmt.Errorf("dispatch config: Workers %d must be positive", cfg.Workers)
	}
	if cfg.Rejects == nil {
		cfg.Rejects = &protocol.RejectCounter{}
	}
	if cfg.FarmUnhealthy == nil {
		cfg.FarmUnhealthy = func() error { return nil }
	}
	log := cmp.Or(cfg.Logger, slog.Default())
	return &Dispatcher{cfg: cfg, log: log, store: cfg.Store, nc: cfg.NATS, rejects: cfg.Rejects,
		signKey: cfg.SigningKey, signPub: cfg.SigningKey.Public().(ed25519.PublicKey), timers: map[string]*time.Timer{},
		wake: make(chan struct{}, 1), wakeFreedCh: make(chan struct{}, 1), reserved: newReservations(), work: newDispatchWork(),
		acks: &acker{st: cfg.Store}, sem: make(chan struct{}, 32), db: newDBHealth(time.Now), phases: newPhases(),
		// Four requests per heartbeat interval on average, bursts of 20.
		limits: newDeviceLimiter(4/scheduler.HeartbeatInterval(cfg.HeartbeatTTL).Seconds(), 20),
		logs:   newLogLimiter(time.Second)}, nil
}

// Start subscribes to the devices' hello and heartbeat requests (in
// QueueGroup) and starts the placement loops and the sweeps, then asks
// for a first round. Work it starts outlives ctx until Stop.
func (dp *Dispatcher) Start(ctx context.Context) error {
	dp.ctx, dp.cancel = context.WithCancel(context.WithoutCancel(ctx))
	for _, s := range []struct {
		subject, kind string
		handle        func(*nats.Msg)
	}{{protocol.HelloWildcard, "hello", dp.handleHello}, {protocol.HeartbeatWildcard, "heartbeat", dp.handleHeartbeat}} {
		handle, kind := s.handle, s.kind
		sub, err := dp.nc.QueueSubscribe(s.subject, QueueGroup, func(m *nats.Msg) {
			// A flooding device is cut off here, before it costs a
			// goroutine slot or any database work.
			if !dp.limits.allow(m.Subject, time.Now()) {
				dp.rejects.Add(kind, RejectRateLimited)
				dp.logs.warn(dp.ctx, dp.log, "rate:"+m.Subject, "dispatch: device request over its rate, dropped", "subject", m.Subject)
				return
			}
			select {
			case dp.sem <- struct{}{}:
			case <-dp.ctx.Done():
				return
			}
			dp.wg.Go(func() {
				defer func() { <-dp.sem }()
				handle(m)
			})
		})
		if err != nil {
			dp.Stop()
			return fmt.Errorf("dispatch: subscribe %s: %w", s.subject, err)
		}
		dp.subs = append(dp.subs, sub)
	}
	if err := dp.nc.Flush(); err != nil {
		dp.Stop()
		return fmt.Errorf("dispatch: NATS flush: %w", err)
	}
	dp.wg.Go(func() { dp.dispatchLoop(dp.ctx) })
	dp.wg.Go(func() { dp.freedLoop(dp.ctx) })
	dp.wg.Go(func() { dp.sweepLoop(dp.ctx) })
	dp.Wake()
	return nil
}

// Stop drains the device subscriptions, stops the loops and waits for the
// assignments in flight, then stops the liveness timers. It is safe to
// call more than once, and before Start.
func (dp *Dispatcher) Stop() {
	dp.stopOnce.Do(func() {
		for _, s := range dp.subs {
			_ = s.Drain()
		}
		if dp.cancel != nil {
			dp.cancel()
		}
		dp.wg.Wait()
		dp.sendWG.Wait()
		dp.stopTimers()
	})
}

// SigningKey returns the public key that verifies assignments.
func (dp *Dispatcher) SigningKey() ed25519.PublicKey { return dp.signPub }

// AssignLatencies returns the assignment round trips observed (grant to
// agent ack), for benchmarks.
func (dp *Dispatcher) AssignLatencies() []time.Duration {
	dp.assignLatency.mu.Lock()
	defer dp.assignLatency.mu.Unlock()
	return append([]time.Duration(nil), dp.assignLatency.d...)
}

// Sweeps returns how many lease, timeout and lost-device sweeps have
// finished (for metrics and tests that wait for a sweep).
func (dp *Dispatcher) Sweeps() uint64 { return dp.sweeps.Load() }

// Collector is the histogram of the assignment phases
// (lesfarm_assign_phase_seconds, by Phase*), to register in a registry.
func (dp *Dispatcher) Collector() prometheus.Collector { return dp.phases.hist }
