package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lesfarm/lesfarm/coordinator/startstop"
	"github.com/lesfarm/lesfarm/lib/backoff"
)

// RunNotifyChannel is the Postgres NOTIFY channel on which the runs table's
// triggers (migration 00023) announce run changes. The payload is
// "<run id> <state> <trigger id or 0>".
const RunNotifyChannel = "lesfarm_runs"

// RunListenerAppName is the application_name of the listener's connection
// (to find it in pg_stat_activity).
const RunListenerAppName = "lesfarm run listener"

// RunNotice is one parsed run change notification.
type RunNotice struct {
	RunID     int64
	State     string
	TriggerID int64
}

// ParseRunNotice parses a lesfarm_runs payload. Only the run id is
// required; state and trigger id are informational.
func ParseRunNotice(payload string) (RunNotice, error) {
	f := strings.Fields(payload)
	if len(f) == 0 || len(f) > 3 {
		return RunNotice{}, fmt.Errorf("store: run notice %.40q: want \"<run id> [state] [trigger id]\"", payload)
	}
	id, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil || id <= 0 {
		return RunNotice{}, fmt.Errorf("store: run notice %.40q: bad run id", payload)
	}
	n := RunNotice{RunID: id}
	if len(f) > 1 {
		n.State = f[1]
	}
	if len(f) > 2 {
		if n.TriggerID, err = strconv.ParseInt(f[2], 10, 64); err != nil || n.TriggerID < 0 {
			return RunNotice{}, fmt.Errorf("store: run notice %.40q: bad trigger id", payload)
		}
	}
	return n, nil
}

// RunListenerConfig tunes NewRunListener. Zero values take the defaults.
type RunListenerConfig struct {
	// MinBackoff and MaxBackoff bound the reconnect delay after the LISTEN
	// connection fails (defaults 100ms and 10s; doubled per failure, with
	// jitter, reset after a successful connect).
	MinBackoff, MaxBackoff time.Duration
	// HealthInterval is how long the connection may stay silent before it
	// is pinged, so a dead TCP peer is noticed (default 30s).
	HealthInterval time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// RunListener holds one dedicated Postgres connection that LISTENs on
// RunNotifyChannel and fans run change notifications out to in-process
// subscribers (run waits, progress streams). A coordinator process runs one.
//
// Delivery is a wake-up, not a message: each subscription has a one-slot
// channel, and a notification for one of its runs fills the slot if it is
// empty, so a slow subscriber coalesces wake-ups and never stalls the
// listener or other subscribers. Subscribers re-read the runs from the
// database when woken. Whenever the connection is (re)established every
// subscriber is woken, because notifications sent while it was down are
// lost. Subscribers should still poll slowly as a safety net.
//
// Build it with NewRunListener, then Start it; Stop (or cancelling Start's
// context) closes the connection. Subscribe may be called before Start and
// after Stop (the subscription then simply never wakes). A RunListener is
// safe for concurrent use.
type RunListener struct {
	cfg     RunListenerConfig
	connCfg *pgx.ConnConfig
	log     *slog.Logger

	mu    sync.Mutex
	byRun map[int64]map[*RunSubscription]struct{}
	all   map[*RunSubscription]struct{}
	hooks []func(RunNotice)

	pid       atomic.Uint32 // backend pid while listening, else 0
	listening chan struct{} // closed and replaced on every state change
	lmu       sync.Mutex
	notices   atomic.Int64
	connects  atomic.Int64

	ss startstop.Service
}

// NewRunListener returns a listener that will connect with st's connection
// settings (its own connection, outside st's pool). Call Start to run it.
func NewRunListener(st *Store, cfg RunListenerConfig) *RunListener {
	cfg.MinBackoff = cmp.Or(cfg.MinBackoff, 100*time.Millisecond)
	cfg.MaxBackoff = max(cmp.Or(cfg.MaxBackoff, 10*time.Second), cfg.MinBackoff)
	cfg.HealthInterval = cmp.Or(cfg.HealthInterval, 30*time.Second)
	cc := st.pool.Config().ConnConfig.Copy()
	if cc.RuntimeParams == nil {
		cc.RuntimeParams = map[string]string{}
	}
	cc.RuntimeParams["application_name"] = RunListenerAppName
	return &RunListener{
		cfg:       cfg,
		connCfg:   cc,
		log:       cmp.Or(cfg.Logger, slog.Default()),
		byRun:     map[int64]map[*RunSubscription]struct{}{},
		all:       map[*RunSubscription]struct{}{},
		listening: make(chan struct{}),
	}
}

// Start runs the listener in the background until ctx is cancelled or Stop
// is called (coordinator/startstop semantics: a Start while it runs does
// nothing). It does not wait for the connection: subscribers are woken
// once it listens. It never returns an error.
func (l *RunListener) Start(ctx context.Context) error {
	return l.ss.StartFunc(ctx, nil, l.run)
}

// Started is closed once the listener's loop runs (Listening says when it
// is connected).
func (l *RunListener) Started() <-chan struct{} { return l.ss.Started() }

// Stop stops the listener and waits for its connection to close. It is safe
// to call more than once, and without Start.
func (l *RunListener) Stop() { l.ss.Stop() }

// BackendPID is the Postgres backend pid of the LISTEN connection, or 0
// while it is not listening.
func (l *RunListener) BackendPID() uint32 { return l.pid.Load() }

// Notices is how many notifications were received (all runs).
func (l *RunListener) Notices() int64 { return l.notices.Load() }

// Connects is how many times the LISTEN connection was established.
func (l *RunListener) Connects() int64 { return l.connects.Load() }

// WaitListening blocks until the listener is connected and listening, or
// ctx ends.
func (l *RunListener) WaitListening(ctx context.Context) error {
	for {
		l.lmu.Lock()
		ch := l.listening
		l.lmu.Unlock()
		if l.pid.Load() != 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}

// setPID records the listening state and wakes WaitListening callers.
func (l *RunListener) setPID(pid uint32) {
	l.pid.Store(pid)
	l.lmu.Lock()
	close(l.listening)
	l.listening = make(chan struct{})
	l.lmu.Unlock()
}

func (l *RunListener) run(ctx context.Context) {
	attempt := 0
	for ctx.Err() == nil {
		err := l.listen(ctx, func() { attempt = 0 })
		if ctx.Err() != nil {
			return
		}
		d := backoff.Delay(attempt, l.cfg.MinBackoff, l.cfg.MaxBackoff)
		l.log.WarnContext(ctx, "store: run listener not listening, retrying", "err", err, "retry_in", d.String())
		select {
		case <-ctx.Done():
			return
		case <-time.After(d):
		}
		attempt++
	}
}

// listen connects, LISTENs and dispatches notifications until the
// connection fails or ctx ends. connected is called once it listens.
func (l *RunListener) listen(ctx context.Context, connected func()) error {
	conn, err := pgx.ConnectConfig(ctx, l.connCfg)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		conn.Close(cctx)
		cancel()
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+RunNotifyChannel); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	l.connects.Add(1)
	// Notifications sent while we were not listening are lost: every
	// subscriber re-reads. (Those subscribing from here on read after
	// LISTEN took effect, so they miss nothing.)
	l.wakeAll()
	l.setPID(conn.PgConn().PID())
	defer l.setPID(0)
	connected()
	l.log.DebugContext(ctx, "store: run listener listening", "backend_pid", conn.PgConn().PID())
	for {
		wctx, cancel := context.WithTimeout(ctx, l.cfg.HealthInterval)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		switch {
		case err == nil:
			l.notices.Add(1)
			l.dispatch(n.Payload)
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, context.DeadlineExceeded) && !conn.IsClosed():
			// Silence: make sure the peer is still there.
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := conn.Ping(pctx)
			cancel()
			if err != nil {
				return fmt.Errorf("health ping: %w", err)
			}
		default:
			return fmt.Errorf("wait for notification: %w", err)
		}
	}
}

// dispatch wakes the subscribers of the payload's run (all subscribers
// when the payload does not parse).
func (l *RunListener) dispatch(payload string) {
	n, err := ParseRunNotice(payload)
	if err != nil {
		l.log.Warn("store: run listener: bad payload, waking everyone", "err", err)
		l.wakeAll()
		return
	}
	l.mu.Lock()
	for s := range l.byRun[n.RunID] {
		s.wake()
	}
	hooks := l.hooks
	l.mu.Unlock()
	for _, h := range hooks {
		h(n)
	}
}

// OnNotice registers fn to be called with every run notice, on the
// listener's goroutine (so fn must not block), and with a zero RunNotice
// whenever the listener (re)connects, since notices sent while it was
// down are lost. The coordinator's dispatcher uses it to place a run the
// moment it is queued or a device frees up, whichever coordinator or
// process made the change.
func (l *RunListener) OnNotice(fn func(RunNotice)) {
	l.mu.Lock()
	l.hooks = append(l.hooks[:len(l.hooks):len(l.hooks)], fn)
	l.mu.Unlock()
}

func (l *RunListener) wakeAll() {
	l.mu.Lock()
	for s := range l.all {
		s.wake()
	}
	hooks := l.hooks
	l.mu.Unlock()
	for _, h := range hooks {
		h(RunNotice{})
	}
}

// RunSubscription is a subscriber's interest in a set of runs. Read C for
// wake-ups; Close it when done.
type RunSubscription struct {
	l   *RunListener
	ids []int64
	c   chan struct{}
}

// Subscribe returns a subscription woken when any of ids changes (and on
// every reconnect of the listener). A nil listener returns a nil
// subscription, whose C never fires and whose Close does nothing.
func (l *RunListener) Subscribe(ids []int64) *RunSubscription {
	if l == nil {
		return nil
	}
	s := &RunSubscription{l: l, ids: ids, c: make(chan struct{}, 1)}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.all[s] = struct{}{}
	for _, id := range ids {
		m := l.byRun[id]
		if m == nil {
			m = map[*RunSubscription]struct{}{}
			l.byRun[id] = m
		}
		m[s] = struct{}{}
	}
	return s
}

// Subscribers returns how many open subscriptions follow run id: a test
// waits on it to know a waiter listens before it changes the run.
func (l *RunListener) Subscribers(id int64) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.byRun[id])
}

// C fires (coalesced) after a change of one of the subscription's runs.
// It is nil for a nil subscription.
func (s *RunSubscription) C() <-chan struct{} {
	if s == nil {
		return nil
	}
	return s.c
}

// wake fills the one-slot channel unless it is already full; the caller
// holds l.mu.
func (s *RunSubscription) wake() {
	select {
	case s.c <- struct{}{}:
	default:
	}
}

// Close unsubscribes. It is safe to call more than once.
func (s *RunSubscription) Close() {
	if s == nil {
		return
	}
	l := s.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.all[s]; !ok {
		return
	}
	delete(l.all, s)
	for _, id := range s.ids {
		if m := l.byRun[id]; m != nil {
			delete(m, s)
			if len(m) == 0 {
				delete(l.byRun, id)
			}
		}
	}
}
