package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// ExpireQueuedRuns ends, as infrastructure failures, the runs that have
// been queued longer than maxWait since they were last queued (at most
// limit per call): no device took them, so waiting longer helps nobody, and
// `run --wait` must not hang for ever on a selector or a build no device
// can run. Each run's error says how long it waited and why (its waiting
// reason at expiry). It returns the runs it ended. maxWait ≤ 0 expires
// nothing.
func (s *Store) ExpireQueuedRuns(ctx context.Context, maxWait time.Duration, limit int) ([]Run, error) {
	if maxWait <= 0 {
		return nil, nil
	}
	cutoff := fmt.Sprintf("%d milliseconds", maxWait.Milliseconds())
	runs, err := collectRuns(s.pool.Query(ctx, `SELECT `+runCols+` FROM runs r WHERE r.state = 'queued' AND r.queued_at < now() - $1::interval
		ORDER BY r.queued_at LIMIT $2`, cutoff, limit))
	if err != nil || len(runs) == 0 {
		return nil, err
	}
	if err := s.FillWaitingReasons(ctx, runs); err != nil {
		return nil, err
	}
	var ended []Run
	err = s.tx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, deferNotifySQL); err != nil {
			return err
		}
		for _, r := range runs {
			why := fmt.Sprintf("not started: queued for %s and no device took it", maxWait)
			if r.WaitingReason != "" {
				why += " (" + r.WaitingReason + ")"
			}
			tag, err := tx.Exec(ctx, `UPDATE runs SET state = 'infra_failed', error = $2, finished_at = now(), updated_at = now()
				WHERE id = $1 AND state = 'queued' AND queued_at < now() - $3::interval`, r.ID, clipText(why), cutoff)
			if err != nil {
				return err
			}
			if tag.RowsAffected() == 1 {
				r.State, r.Error = RunInfraFailed, why
				ended = append(ended, r)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: expire queued runs: %w", err)
	}
	notices := make([]Run, len(ended))
	for i, r := range ended {
		notices[i] = Run{ID: r.ID, State: RunInfraFailed, TriggerID: r.TriggerID}
	}
	s.notifyRuns(ctx, notices)
	return ended, nil
}
