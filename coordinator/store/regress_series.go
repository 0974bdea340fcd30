package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// This file holds the regression series and their points (coordinator/regress
// feeds them; tables regress_series and regress_points, migrations/00020_*).

// RegressSeries is one series key with its id.
type RegressSeries struct {
	ID          int64  `json:"id"`
	Suite       string `json:"suite"`
	Config      string `json:"config"`
	Metric      string `json:"metric"`
	DeviceModel string `json:"device_model"`
	OSMajor     string `json:"os_major"`
	Lineage     string `json:"lineage"`
	Emulated    bool   `json:"emulated"`
}

// RegressPoint is one stored point of a series.
type RegressPoint struct {
	SeriesID int64   `json:"-"`
	Seq      int64   `json:"seq"`
	RunKey   string  `json:"run,omitempty"`
	Value    float64 `json:"value"`
	Stddev   float64 `json:"stddev,omitempty"`
	N        int     `json:"n,omitempty"`
	Build    string  `json:"build,omitempty"`
	// BuildPosition, GitSHA and ExecutableSHA256 are filled by
	// QuerySeries only: the position of Build in the series' lineage (0
	// when Build is not a registered build of that lineage), the build's
	// git sha, and the sha256 of the executable that produced the point's
	// run (from its results; "" before provenance was recorded).
	BuildPosition    int64  `json:"build_position,omitempty"`
	GitSHA           string `json:"git_sha,omitempty"`
	ExecutableSHA256 string `json:"executable_sha256,omitempty"`
	// Bucket is set on a downsampled point (DownsampleSeries): the builds
	// it summarises.
	Bucket *PointBucket `json:"bucket,omitempty"`
}

// AddRegressPointParams is one observation to record.
type AddRegressPointParams struct {
	Series RegressSeries // ID ignored; the key fields select or create the series
	Point  RegressPoint  // SeriesID ignored
}

// AddRegressPoints records points, creating their series as needed, in one
// transaction. Re-adding a (series, seq, run) replaces its value, so
// replays are idempotent. It returns the series id of each point, in order.
func (s *Store) AddRegressPoints(ctx context.Context, ps []AddRegressPointParams) ([]int64, error) {
	ids := make([]int64, len(ps))
	err := s.tx(ctx, func(tx pgx.Tx) error {
		for i, p := range ps {
			k := p.Series
			if k.Suite == "" || k.Metric == "" {
				return fmt.Errorf("store: regress point %d: suite and metric are required", i)
			}
			// Look the series up without locking it: an upsert (DO
			// UPDATE) would hold its row until commit, serialising every
			// result of one suite, config and device model behind the
			// others. Only a series not yet there is inserted; when a
			// concurrent transaction inserts it first, DO NOTHING waits
			// for that commit and the second read finds it.
			var err error
			for try := 0; try < 2; try++ {
				err = tx.QueryRow(ctx, `
				WITH s AS (SELECT id FROM regress_series WHERE suite = $1 AND config = $2 AND metric = $3
					AND device_model = $4 AND os_major = $5 AND lineage = $6 AND emulated = $7),
				i AS (INSERT INTO regress_series (suite, config, metric, device_model, os_major, lineage, emulated)
					SELECT $1, $2, $3, $4, $5, $6, $7 WHERE NOT EXISTS (SELECT 1 FROM s)
					ON CONFLICT (suite, config, metric, device_model, os_major, lineage, emulated) DO NOTHING
					RETURNING id)
				SELECT id FROM s UNION ALL SELECT id FROM i`,
					k.Suite, k.Config, k.Metric, k.DeviceModel, k.OSMajor, k.Lineage, k.Emulated).Scan(&ids[i])
				if err = notFound(err); !errors.Is(err, ErrNotFound) {
					break
				}
			}
			if err != nil {
				return fmt.Errorf("store: regress series: %w", err)
			}
			pt := p.Point
			_, err = tx.Exec(ctx, `
				INSERT INTO regress_points (series_id, seq, run_key, value, stddev, n, build)
				VALUES ($1, $2, $3, $4, $5, $6, $7)
				ON CONFLICT (series_id, seq, run_key)
				DO UPDATE SET value = EXCLUDED.value, stddev = EXCLUDED.stddev, n = EXCLUDED.n, build = EXCLUDED.build`,
				ids[i], pt.Seq, pt.RunKey, pt.Value, pt.Stddev, pt.N, pt.Build)
			if err != nil {
				return fmt.Errorf("store: regress point: %w", err)
			}
		}
		return nil
	})
	return ids, err
}

// RegressSeriesByID returns one series.
func (s *Store) RegressSeriesByID(ctx context.Context, id int64) (*RegressSeries, error) {
	var r RegressSeries
	err := s.pool.QueryRow(ctx, `SELECT id, suite, config, metric, device_model, os_major, lineage, emulated
		FROM regress_series WHERE id = $1`, id).Scan(&r.ID, &r.Suite, &r.Config, &r.Metric, &r.DeviceModel, &r.OSMajor, &r.Lineage, &r.Emulated)
	if err != nil {
		return nil, notFound(err)
	}
	return &r, nil
}

// ListRegressSeries returns the series of suite and lineage, optionally
// only of config (config "" means all), ordered by id.
func (s *Store) ListRegressSeries(ctx context.Context, suite, lineage, config string) ([]RegressSeries, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, suite, config, metric, device_model, os_major, lineage, emulated
		FROM regress_series WHERE suite = $1 AND lineage = $2 AND ($3 = '' OR config = $3) ORDER BY id`, suite, lineage, config)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (RegressSeries, error) {
		var x RegressSeries
		err := r.Scan(&x.ID, &x.Suite, &x.Config, &x.Metric, &x.DeviceModel, &x.OSMajor, &x.Lineage, &x.Emulated)
		return x, err
	})
}

// RegressPoints returns up to limit points of a series with seq in
// [fromSeq, toSeq], the most recent ones when there are more, ordered by
// seq then recording time.
func (s *Store) RegressPoints(ctx context.Context, seriesID, fromSeq, toSeq int64, limit int) ([]RegressPoint, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT series_id, seq, run_key, value, stddev, n, build FROM (
			SELECT * FROM regress_points WHERE series_id = $1 AND seq BETWEEN $2 AND $3
			ORDER BY seq DESC, recorded_at DESC LIMIT $4) p
		ORDER BY seq, recorded_at`, seriesID, fromSeq, toSeq, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (RegressPoint, error) {
		var p RegressPoint
		err := r.Scan(&p.SeriesID, &p.Seq, &p.RunKey, &p.Value, &p.Stddev, &p.N, &p.Build)
		return p, err
	})
}
