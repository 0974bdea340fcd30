package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// RegressSiblingPoints returns the points of up to maxSeries sibling
// series of seriesID — series of the same metric, device model, OS major
// and emulation, of any suite, config or lineage, seriesID excluded; the
// most recently created first — each with its most recent limit points
// in seq order, keyed by series id. The regression monitor pools their
// noise (regress.PoolNoise): the same phones measure them all. An unknown
// seriesID has no siblings.
func (s *Store) RegressSiblingPoints(ctx context.Context, seriesID int64, maxSeries, limit int) (map[int64][]RegressPoint, error) {
	rows, err := s.pool.Query(ctx, `
		WITH me AS (
			SELECT metric, device_model, os_major, emulated FROM regress_series WHERE id = $1
		), sib AS (
			SELECT s.id FROM regress_series s JOIN me ON s.metric = me.metric AND s.device_model = me.device_model
				AND s.os_major = me.os_major AND s.emulated = me.emulated
			WHERE s.id <> $1 ORDER BY s.id DESC LIMIT $2
		)
		SELECT series_id, seq, run_key, value, stddev, n, build FROM (
			SELECT p.*, row_number() OVER (PARTITION BY p.series_id ORDER BY p.seq DESC, p.recorded_at DESC) AS rn
			FROM regress_points p WHERE p.series_id IN (SELECT id FROM sib)) x
		WHERE rn <= $3
		ORDER BY series_id, seq, recorded_at`, seriesID, max(maxSeries, 1), max(limit, 1))
	if err != nil {
		return nil, fmt.Errorf("store: regress sibling points: %w", err)
	}
	ps, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (RegressPoint, error) {
		var p RegressPoint
		err := r.Scan(&p.SeriesID, &p.Seq, &p.RunKey, &p.Value, &p.Stddev, &p.N, &p.Build)
		return p, err
	})
	if err != nil {
		return nil, fmt.Errorf("store: regress sibling points: %w", err)
	}
	out := map[int64][]RegressPoint{}
	for _, p := range ps {
		out[p.SeriesID] = append(out[p.SeriesID], p)
	}
	return out, nil
}
