package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// LineageSummary is one build lineage seen anywhere in the farm: in runs,
// schedules, regression series or alert groups.
type LineageSummary struct {
	Lineage   string     `json:"lineage"`
	Runs      int64      `json:"runs" doc:"Runs of the lineage."`
	LastRunAt *time.Time `json:"last_run_at,omitempty" doc:"When its newest run was created."`
	Series    int64      `json:"series" doc:"Regression series kept for it."`
	// NewRegressions counts its alert groups that are regressions still
	// awaiting triage (status new).
	NewRegressions int64 `json:"new_regressions" doc:"Regression alert groups awaiting triage (status new)."`
}

// Lineages returns every lineage with its counts, main first, then by
// name.
func (s *Store) Lineages(ctx context.Context) ([]LineageSummary, error) {
	rows, err := s.pool.Query(ctx, `
		WITH l AS (
			SELECT lineage FROM runs UNION SELECT lineage FROM schedules
			UNION SELECT lineage FROM regress_series UNION SELECT lineage FROM alert_groups)
		SELECT l.lineage,
			(SELECT count(*) FROM runs r WHERE r.lineage = l.lineage),
			(SELECT max(r.created_at) FROM runs r WHERE r.lineage = l.lineage),
			(SELECT count(*) FROM regress_series x WHERE x.lineage = l.lineage),
			(SELECT count(*) FROM alert_groups g WHERE g.lineage = l.lineage AND g.regression AND g.status = 'new')
		FROM l ORDER BY l.lineage <> $1, l.lineage`, DefaultLineage)
	if err != nil {
		return nil, fmt.Errorf("store: lineages: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (LineageSummary, error) {
		var x LineageSummary
		err := r.Scan(&x.Lineage, &x.Runs, &x.LastRunAt, &x.Series, &x.NewRegressions)
		return x, err
	})
	if err != nil {
		return nil, fmt.Errorf("store: lineages: %w", err)
	}
	return out, nil
}
