package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// This file holds automatic bisection (schedules with bisect 'auto',
// table bisect_auto, migration 00067): which alert groups are due one,
// and what became of each try.

// AutoBisectCandidate is an alert group due an automatic bisection: a
// regression raised by the runs of ScheduleID, a schedule with bisect
// 'auto'.
type AutoBisectCandidate struct {
	GroupID      int64
	ScheduleID   int64
	ScheduleName string
	// Attempts is the tries so far (0: never tried).
	Attempts int
}

// AutoBisectCandidates returns up to limit alert groups due an automatic
// bisection, oldest first: regression groups created within maxAge, not
// triaged away (status new or acknowledged), not waiting for or refuted
// by a confirmation rerun, with a regression alert whose series has a
// point at or after the change from a run of a schedule with bisect
// 'auto'; never bisected, and either never tried or due a retry.
func (s *Store) AutoBisectCandidates(ctx context.Context, maxAge time.Duration, limit int) ([]AutoBisectCandidate, error) {
	rows, err := s.pool.Query(ctx, `SELECT g.id, sc.id, sc.name, coalesce(x.attempts, 0)
		FROM alert_groups g
		LEFT JOIN bisect_auto x ON x.group_id = g.id
		CROSS JOIN LATERAL (
			SELECT sc.id, sc.name FROM alerts a
			JOIN regress_points p ON p.series_id = a.series_id AND p.seq >= a.seq AND p.run_key ~ '^[0-9]{1,18}$'
			JOIN runs r ON r.id = p.run_key::bigint
			JOIN triggers t ON t.id = r.trigger_id
			JOIN schedules sc ON t.source = 'schedule:' || sc.id
			WHERE a.group_id = g.id AND a.direction = 'regression' AND sc.bisect = 'auto'
			ORDER BY p.seq LIMIT 1) sc
		WHERE g.regression AND g.status IN ('new', 'acknowledged') AND g.confirmation IN ('none', 'confirmed')
			AND g.created_at > now() - make_interval(secs => $1)
			AND (x.group_id IS NULL OR (x.bisection_id IS NULL AND x.next_try_at <= now()))
			AND NOT EXISTS (SELECT 1 FROM bisections b WHERE b.group_id = g.id)
		ORDER BY g.id LIMIT $2`, maxAge.Seconds(), max(limit, 1))
	if err != nil {
		return nil, fmt.Errorf("store: auto bisect candidates: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (AutoBisectCandidate, error) {
		var c AutoBisectCandidate
		err := r.Scan(&c.GroupID, &c.ScheduleID, &c.ScheduleName, &c.Attempts)
		return c, err
	})
}

// AutoBisectParams record one try of an automatic bisection.
type AutoBisectParams struct {
	GroupID, ScheduleID int64
	// BisectionID is the bisection started (0: none was).
	BisectionID int64
	// Outcome says what happened in one line.
	Outcome string
	// RetryAt is when to try again; zero: never.
	RetryAt time.Time
}

// RecordAutoBisect stores a try of group p.GroupID's automatic bisection
// (the first, or a retry that replaces the previous outcome).
func (s *Store) RecordAutoBisect(ctx context.Context, p *AutoBisectParams) error {
	var retry *time.Time
	if !p.RetryAt.IsZero() {
		retry = &p.RetryAt
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO bisect_auto (group_id, schedule_id, bisection_id, outcome, next_try_at)
		VALUES ($1, $2, NULLIF($3::bigint, 0), $4, $5)
		ON CONFLICT (group_id) DO UPDATE SET bisection_id = EXCLUDED.bisection_id, outcome = EXCLUDED.outcome,
			next_try_at = EXCLUDED.next_try_at, attempts = bisect_auto.attempts + 1, updated_at = now()`,
		p.GroupID, p.ScheduleID, p.BisectionID, clipText(p.Outcome), retry)
	if err != nil {
		return fmt.Errorf("store: record auto bisect: %w", err)
	}
	return nil
}

// AutoBisectOutcome returns the outcome of group gid's automatic
// bisection and its attempts, or ErrNotFound when none was tried.
func (s *Store) AutoBisectOutcome(ctx context.Context, gid int64) (string, int, error) {
	var out string
	var n int
	err := s.pool.QueryRow(ctx, `SELECT outcome, attempts FROM bisect_auto WHERE group_id = $1`, gid).Scan(&out, &n)
	return out, n, notFound(err)
}
