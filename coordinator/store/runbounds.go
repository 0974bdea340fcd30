package store

import (
	"context"
	"fmt"

	"github.com/lesfarm/lesfarm/protocol"
)

// RunBounds returns, for each of runIDs that exists, what ingest checks
// its messages against: the configs of its assignment (its job's spec
// expanded, as the assignment carried them) and its model's size. A run's
// bounds never change (its job is an immutable snapshot), so callers may
// cache them.
func (s *Store) RunBounds(ctx context.Context, runIDs []int64) (map[int64]*protocol.RunBounds, error) {
	out := make(map[int64]*protocol.RunBounds, len(runIDs))
	if len(runIDs) == 0 {
		return out, nil
	}
	rows, err := s.pool.Query(ctx, `SELECT id, job_id FROM runs WHERE id = ANY($1)`, runIDs)
	if err != nil {
		return nil, fmt.Errorf("store: run bounds: %w", err)
	}
	jobOf := map[int64]int64{}
	for rows.Next() {
		var id, job int64
		if err := rows.Scan(&id, &job); err != nil {
			rows.Close()
			return nil, fmt.Errorf("store: run bounds: %w", err)
		}
		jobOf[id] = job
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: run bounds: %w", err)
	}
	byJob := map[int64]*protocol.RunBounds{}
	for id, job := range jobOf {
		b, ok := byJob[job]
		if !ok {
			j, err := s.GetJob(ctx, job) // cached
			if err != nil {
				return nil, fmt.Errorf("store: run bounds: job %d: %w", job, err)
			}
			b = &protocol.RunBounds{Configs: j.Spec.Expand(), ModelBytes: int64(j.Spec.Model.Size)}
			byJob[job] = b
		}
		out[id] = b
	}
	return out, nil
}
