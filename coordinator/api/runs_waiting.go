package api

import (
	"cmp"
	"context"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/store"
)

// waitingReasonEvery is how often a follower of runs recomputes the
// waiting reasons of its queued runs: each computation reads every online
// device, and the loop wakes on every progress change of the others.
const waitingReasonEvery = 5 * time.Second

// waitingReasons caches the waiting reasons of a follower's queued runs
// between computations.
type waitingReasons struct {
	at  time.Time
	why map[int64]string
}

// fill sets WaitingReason on the queued runs among runs, recomputing the
// reasons (store.FillWaitingReasons) at most every waitingReasonEvery or
// when a run is queued that has none yet.
func (w *waitingReasons) fill(ctx context.Context, h *runHandler, runs []store.Run) error {
	stale := time.Since(w.at) >= waitingReasonEvery
	for i := range runs {
		if _, ok := w.why[runs[i].ID]; runs[i].State == store.RunQueued && !ok {
			stale = true
		}
	}
	if stale {
		rctx, cancel := context.WithTimeout(ctx, cmp.Or(h.dbTimeout, DefaultRequestTimeout))
		err := h.st.FillWaitingReasons(rctx, runs) // store/waiting.go
		cancel()
		if err != nil {
			return err
		}
		w.at, w.why = time.Now(), map[int64]string{}
		for _, r := range runs {
			if r.State == store.RunQueued {
				w.why[r.ID] = r.WaitingReason
			}
		}
		return nil
	}
	for i := range runs {
		if runs[i].State == store.RunQueued {
			runs[i].WaitingReason = w.why[runs[i].ID]
		}
	}
	return nil
}
