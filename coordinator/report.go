package coordinator

import (
	"context"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/dispatch"
	"github.com/lesfarm/lesfarm/coordinator/ingest"
	"github.com/lesfarm/lesfarm/coordinator/store"
)

// reporter is the coordinator's ingest.Reporter: the dispatcher commits
// each batch of results and places the devices they free (CompleteRuns,
// Committed), bisections advance and the regression monitor observes each
// finished run (Finished), and the phases go to the dispatcher's
// histogram. extra, when set (Config.Ingest.Reporter), is told the same
// reports after the coordinator's own; its CompleteRuns is not used.
type reporter struct {
	*dispatch.Dispatcher
	c     *Coordinator
	extra ingest.Reporter
}

// Committed frees the result's device for placement (unless its commit
// placed it), without waiting for the slower Finished reports.
func (r reporter) Committed(ctx context.Context, run *store.Run) {
	r.Freed(run)
	if r.extra != nil {
		r.extra.Committed(ctx, run)
	}
}

// Finished wakes the bisector and runs regression detection on the run.
// A failed detection is logged by the monitor and does not undo the
// committed result.
func (r reporter) Finished(ctx context.Context, run *store.Run) {
	r.c.bisect.Wake()
	if r.c.monitor != nil {
		_, _ = r.c.monitor.ObserveRun(ctx, run)
	}
	if r.extra != nil {
		r.extra.Finished(ctx, run)
	}
}

// Phase records an ingest phase in lesfarm_assign_phase_seconds.
func (r reporter) Phase(phase string, d time.Duration) {
	r.Dispatcher.Phase(phase, d)
	if r.extra != nil {
		r.extra.Phase(phase, d)
	}
}
