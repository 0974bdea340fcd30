package bisect

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/store"
)

// Automatic bisection defaults (Config.AutoPoll, AutoMaxAge, AutoRetry).
const (
	DefaultAutoPoll   = 30 * time.Second
	DefaultAutoMaxAge = 72 * time.Hour
	DefaultAutoRetry  = 10 * time.Minute
)

// AutoBisect starts the automatic bisections that are due: one for each
// regression alert group raised by the runs of a schedule with bisect
// "auto" (store.AutoBisectCandidates) that has never had one. Each try is
// recorded with the group (at most one bisection per group, ever): the
// bisection started; or, when Create refuses, why — retried after
// Config.AutoRetry only while no device of the alert's model is online,
// never for a refusal that more time does not cure (no good build before
// the alert, builds missing for the platform, ...). It returns how many it
// started.
func (b *Bisector) AutoBisect(ctx context.Context) (int, error) {
	st := b.cfg.Store
	cands, err := st.AutoBisectCandidates(ctx, b.cfg.AutoMaxAge, 16)
	if err != nil {
		return 0, err
	}
	started := 0
	var errs []error
	for _, c := range cands {
		p := &store.AutoBisectParams{GroupID: c.GroupID, ScheduleID: c.ScheduleID}
		bs, err := b.Create(ctx, &Request{GroupID: c.GroupID, RequestedBy: fmt.Sprintf("schedule %s (bisect: auto)", c.ScheduleName)})
		var prob *Problem
		switch {
		case err == nil:
			p.BisectionID, p.Outcome = bs.ID, fmt.Sprintf("started bisection %d", bs.ID)
			started++
			b.log.InfoContext(ctx, "bisect: started automatically", "bisection_id", bs.ID, "group_id", c.GroupID, "schedule_id", c.ScheduleID)
		case errors.As(err, &prob) && prob.Running != 0:
			p.BisectionID, p.Outcome = prob.Running, fmt.Sprintf("bisection %d was already running", prob.Running)
		case errors.As(err, &prob) && prob.Status == http.StatusConflict:
			p.Outcome, p.RetryAt = "waiting: "+prob.Msg, time.Now().Add(b.cfg.AutoRetry)
		case errors.As(err, &prob):
			p.Outcome = "refused: " + prob.Msg
			b.log.WarnContext(ctx, "bisect: automatic bisection refused", "group_id", c.GroupID, "schedule_id", c.ScheduleID, "reason", prob.Msg)
		default:
			errs = append(errs, fmt.Errorf("bisect: automatic bisection of alert group %d: %w", c.GroupID, err))
			continue // tried again at the next poll
		}
		if err := st.RecordAutoBisect(ctx, p); err != nil {
			errs = append(errs, err)
		}
	}
	return started, errors.Join(errs...)
}
