package dispatch

import (
	"context"
	"sync"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/store"
)

// dbHealth decides when this coordinator may declare devices lost and
// leases expired. Both are judged from timestamps that only heartbeats
// move forward, and heartbeats cannot move them while this coordinator was
// not running or the database did not answer: right after a restart or an
// outage every lease looks expired, although the agents kept working and
// their heartbeats only failed on the coordinator's side. So failover
// waits until the database has answered for one full TTL (plus the lost
// grace) since the coordinator started or since it last failed; by then
// every live agent has heartbeated and renewed what it holds.
//
// dbHealth is safe for concurrent use.
type dbHealth struct {
	mu      sync.Mutex
	down    bool
	okSince time.Time
	now     func() time.Time
}

func newDBHealth(now func() time.Time) *dbHealth {
	return &dbHealth{okSince: now(), now: now}
}

// observe records the outcome of a database call: an unavailability error
// marks the database down; the first success after that starts the grace.
func (h *dbHealth) observe(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case store.Unavailable(err):
		h.down = true
	case err == nil && h.down:
		h.down, h.okSince = false, h.now()
	}
}

// settled reports whether the database has been answering for at least
// grace.
func (h *dbHealth) settled(grace time.Duration) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return !h.down && h.now().Sub(h.okSince) >= grace
}

// failoverGrace is how long the database must have answered before this
// coordinator fails over devices and leases.
func (dp *Dispatcher) failoverGrace() time.Duration {
	return max(dp.cfg.HeartbeatTTL, dp.cfg.LeaseTTL) + dp.cfg.LostGrace
}

// mayFailOver probes the database (bounded) and reports whether failover
// is allowed now.
func (dp *Dispatcher) mayFailOver(ctx context.Context) bool {
	pctx, cancel := context.WithTimeout(ctx, dp.dbTimeout())
	err := dp.store.Ping(pctx)
	cancel()
	dp.db.observe(err)
	return err == nil && dp.db.settled(dp.failoverGrace())
}

// dbTimeout bounds one database call of the sweep and the failover
// probe. It is generous on purpose: a database that is merely slow under
// load must not count as down (that would postpone failover without end);
// only one that does not answer for seconds does.
func (dp *Dispatcher) dbTimeout() time.Duration { return 5 * time.Second }
