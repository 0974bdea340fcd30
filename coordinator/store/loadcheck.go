package store

import (
	"context"
	"fmt"
)

// CountSamplesByRun returns the number of stored telemetry samples of each
// run in ids (runs without samples are absent), in one query. Load tests
// use it to count lost and duplicated samples against what the agents sent.
func (s *Store) CountSamplesByRun(ctx context.Context, ids []int64) (map[int64]int64, error) {
	rows, err := s.pool.Query(ctx, `SELECT run_id, sum(n)::bigint FROM sample_batches WHERE run_id = ANY($1) GROUP BY run_id`, ids)
	if err != nil {
		return nil, fmt.Errorf("store: count samples by run: %w", err)
	}
	defer rows.Close()
	out := make(map[int64]int64, len(ids))
	for rows.Next() {
		var id, n int64
		if err := rows.Scan(&id, &n); err != nil {
			return nil, fmt.Errorf("store: count samples by run: %w", err)
		}
		out[id] = n
	}
	return out, rows.Err()
}
