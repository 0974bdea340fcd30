package dispatch

import (
	"context"
	"sync"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/store"
)

// sweepLoop is the safety net: expired leases, run timeouts and devices
// past their TTL whose timer lived elsewhere.
func (dp *Dispatcher) sweepLoop(ctx context.Context) {
	t := time.NewTicker(dp.cfg.SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		dp.sweep(ctx)
	}
}

func (dp *Dispatcher) sweep(ctx context.Context) {
	defer dp.sweeps.Add(1)
	dp.limits.prune(time.Now())
	// Expired leases and silent devices are only failed over once the
	// database has answered for a TTL (see dbHealth); run timeouts are
	// the runs' own deadlines and go on.
	failover := dp.mayFailOver(ctx)
	if failover {
		lctx, cancel := context.WithTimeout(ctx, dp.dbTimeout())
		lost, err := dp.store.ExpireLeases(lctx, 500)
		cancel()
		dp.db.observe(err)
		if err != nil && ctx.Err() == nil {
			dp.log.ErrorContext(ctx, "dispatch: expire leases", "err", err)
		}
		dp.noteLost(ctx, lost)
	}
	tctx, tcancel := context.WithTimeout(ctx, dp.dbTimeout())
	timedOut, err := dp.timeoutRuns(tctx)
	tcancel()
	if err != nil && ctx.Err() == nil {
		dp.log.ErrorContext(ctx, "dispatch: timeout runs", "err", err)
	}
	for _, t := range timedOut {
		dp.log.WarnContext(ctx, "dispatch: run timed out", "run_id", t.RunID, "device_id", t.DeviceID, "requeued", t.Requeued)
		pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		dp.pushCancel(pctx, t.RunID, t.Token, t.DeviceID, "run timed out")
		cancel()
	}
	if len(timedOut) > 0 {
		dp.Wake()
	}
	qctx, qcancel := context.WithTimeout(ctx, dp.dbTimeout())
	expired, err := dp.store.ExpireQueuedRuns(qctx, dp.cfg.QueueTimeout, 500) // store/queue_expiry.go
	qcancel()
	if err != nil && ctx.Err() == nil {
		dp.log.ErrorContext(ctx, "dispatch: expire queued runs", "err", err)
	}
	for _, r := range expired {
		dp.log.WarnContext(ctx, "dispatch: run expired in the queue", "run_id", r.ID, "reason", r.Error)
	}
	if !failover {
		return
	}
	dctx, cancel := context.WithTimeout(ctx, dp.dbTimeout())
	defer cancel()
	devs, runs, err := dp.store.SweepLostDevices(dctx, dp.cfg.LostGrace)
	dp.db.observe(err)
	if err != nil && ctx.Err() == nil {
		dp.log.ErrorContext(ctx, "dispatch: sweep devices", "err", err)
	}
	for _, d := range devs {
		dp.log.WarnContext(ctx, "dispatch: device lost (sweep)", "device_id", d)
	}
	dp.noteLost(ctx, runs)
}

// latency keeps recent assignment round trips for metrics and benchmarks.
type latency struct {
	mu sync.Mutex
	d  []time.Duration
}

func (l *latency) observe(d time.Duration) {
	l.mu.Lock()
	if len(l.d) < 1<<16 {
		l.d = append(l.d, d)
	}
	l.mu.Unlock()
}

// timeoutRuns ends the runs past their deadline: blamed on their build
// normally, as infrastructure failures while the farm is or was just
// unhealthy (Config.FarmUnhealthy), since their reports may be what it
// could not take.
func (dp *Dispatcher) timeoutRuns(ctx context.Context) ([]store.TimedOutRun, error) {
	if why := dp.cfg.FarmUnhealthy(); why != nil {
		return dp.store.TimeoutRunsUnhealthy(ctx, 500, why.Error())
	}
	return dp.store.TimeoutRuns(ctx, 500)
}
