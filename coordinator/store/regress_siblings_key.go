package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// RegressSiblingsParams names the series whose siblings
// RegressSiblingsOf returns, and how many of them.
type RegressSiblingsParams struct {
	// Of is the series' key (its ID is ignored); it need not be stored.
	Of RegressSeries
	// Skip lists further keys (their ID ignored) to leave out: series the
	// caller already holds, such as those of an offline input file.
	Skip []RegressSeries
	// MaxSeries is the most siblings returned, the most recently created
	// first; Limit the most recent points of each.
	MaxSeries, Limit int
}

// RegressSibling is one sibling series with its most recent points in seq
// order.
type RegressSibling struct {
	Series RegressSeries
	Points []RegressPoint
}

// RegressSiblingsOf returns the siblings of p.Of under the rule of
// RegressSiblingPoints — the series of the same metric, device model, OS
// major and emulation, of any suite, config or lineage, the series itself
// excluded, the most recently created first — with their keys, for a
// series named by its key rather than its ID (the offline `lesfarm regress
// detect` judging a CSV series with the noise its siblings in the
// coordinator's database show). Series listed in p.Skip are left out.
// Siblings are returned in id order.
func (s *Store) RegressSiblingsOf(ctx context.Context, p *RegressSiblingsParams) ([]RegressSibling, error) {
	var suites, configs, lineages []string
	for _, k := range append([]RegressSeries{p.Of}, p.Skip...) {
		suites, configs, lineages = append(suites, k.Suite), append(configs, k.Config), append(lineages, k.Lineage)
	}
	rows, err := s.pool.Query(ctx, `
		WITH sib AS (
			SELECT s.* FROM regress_series s
			WHERE s.metric = $1 AND s.device_model = $2 AND s.os_major = $3 AND s.emulated = $4
				AND NOT EXISTS (SELECT 1 FROM unnest($5::text[], $6::text[], $7::text[]) AS x(suite, config, lineage)
					WHERE x.suite = s.suite AND x.config = s.config AND x.lineage = s.lineage)
			ORDER BY s.id DESC LIMIT $8
		)
		SELECT sib.id, sib.suite, sib.config, sib.lineage, x.seq, x.run_key, x.value, x.stddev, x.n, x.build FROM sib
		JOIN LATERAL (
			SELECT * FROM regress_points pt WHERE pt.series_id = sib.id ORDER BY pt.seq DESC, pt.recorded_at DESC LIMIT $9
		) x ON true
		ORDER BY sib.id, x.seq, x.recorded_at`,
		p.Of.Metric, p.Of.DeviceModel, p.Of.OSMajor, p.Of.Emulated, suites, configs, lineages, max(p.MaxSeries, 1), max(p.Limit, 1))
	if err != nil {
		return nil, fmt.Errorf("store: regress siblings of %s/%s: %w", p.Of.Suite, p.Of.Config, err)
	}
	var out []RegressSibling
	_, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (struct{}, error) {
		var k RegressSeries
		var pt RegressPoint
		if err := r.Scan(&k.ID, &k.Suite, &k.Config, &k.Lineage, &pt.Seq, &pt.RunKey, &pt.Value, &pt.Stddev, &pt.N, &pt.Build); err != nil {
			return struct{}{}, err
		}
		pt.SeriesID = k.ID
		if len(out) == 0 || out[len(out)-1].Series.ID != k.ID {
			k.Metric, k.DeviceModel, k.OSMajor, k.Emulated = p.Of.Metric, p.Of.DeviceModel, p.Of.OSMajor, p.Of.Emulated
			out = append(out, RegressSibling{Series: k})
		}
		last := &out[len(out)-1]
		last.Points = append(last.Points, pt)
		return struct{}{}, nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: regress siblings of %s/%s: %w", p.Of.Suite, p.Of.Config, err)
	}
	return out, nil
}
