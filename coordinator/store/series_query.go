package store

import (
	"cmp"
	"context"
	"fmt"
	"slices"
)

// QuerySeries returns the matching series with their last q.Last points
// (the most recently recorded, by seq), for the dashboard's "metric by
// device model over builds" chart. Each point carries its build's
// position in the series' lineage, the build's git sha and the sha256 of
// the executable behind its run, and the points of a series are in build
// order (BuildOrder).
func (s *Store) QuerySeries(ctx context.Context, q *SeriesQuery) ([]SeriesWithPoints, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT s.id, s.suite, s.config, s.metric, s.device_model, s.os_major, s.lineage, s.emulated,
		       p.seq, p.run_key, p.value, p.stddev, p.n, p.build, p.position, p.git_sha, p.exe
		FROM regress_series s
		LEFT JOIN LATERAL (
			SELECT r.*, CASE WHEN b.lineage = s.lineage THEN b.position ELSE 0 END AS position,
			       coalesce(b.git_sha, '') AS git_sha,
			       coalesce((SELECT x.executable_sha256 FROM results x
			                 WHERE x.run_id = CASE WHEN r.run_key ~ '^[0-9]{1,18}$' THEN r.run_key::bigint END
			                   AND x.executable_sha256 <> '' LIMIT 1), '') AS exe
			FROM (SELECT * FROM regress_points WHERE series_id = s.id ORDER BY seq DESC, recorded_at DESC LIMIT $6) r
			LEFT JOIN builds b ON b.id = r.build) p ON true
		WHERE s.suite = $1 AND s.metric = $2 AND ($3 = '' OR s.config = $3) AND ($4 = '' OR s.lineage = $4)
		  AND ($5 = '' OR s.device_model = $5)
		ORDER BY s.device_model, s.os_major, s.emulated, s.config, s.lineage, s.id, p.seq, p.recorded_at
		LIMIT 100000`, q.Suite, q.Metric, q.Config, q.Lineage, q.DeviceModel, max(q.Last, 1))
	if err != nil {
		return nil, fmt.Errorf("store: query series: %w", err)
	}
	defer rows.Close()
	var out []SeriesWithPoints
	for rows.Next() {
		var sr RegressSeries
		var seq, pos *int64
		var runKey, build, gitSHA, exe *string
		var value, stddev *float64
		var n *int
		if err := rows.Scan(&sr.ID, &sr.Suite, &sr.Config, &sr.Metric, &sr.DeviceModel, &sr.OSMajor, &sr.Lineage, &sr.Emulated,
			&seq, &runKey, &value, &stddev, &n, &build, &pos, &gitSHA, &exe); err != nil {
			return nil, fmt.Errorf("store: query series: %w", err)
		}
		if len(out) == 0 || out[len(out)-1].ID != sr.ID {
			out = append(out, SeriesWithPoints{RegressSeries: sr, Points: []RegressPoint{}})
		}
		if seq != nil {
			cur := &out[len(out)-1]
			cur.Points = append(cur.Points, RegressPoint{SeriesID: sr.ID, Seq: *seq, RunKey: *runKey, Value: *value, Stddev: *stddev, N: *n,
				Build: *build, BuildPosition: *pos, GitSHA: *gitSHA, ExecutableSHA256: *exe})
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: query series: %w", err)
	}
	for i := range out {
		sortByBuild(out[i].Points)
	}
	return out, nil
}

// BuildOrder returns the distinct seqs of points in build order, the
// order in which series are plotted: by the position of their build in
// the series' lineage, then by seq. A point without a position (its
// build is not a registered build of the lineage: a label from before
// the build registry, an agent's embedded build) takes the highest
// position among the points recorded before it (smaller seq), so it sits
// after the newest build that had run by then; points without positions
// at all keep seq order. All points of one seq are one trigger's, so of
// one build; the highest position among them is used.
func BuildOrder(points []RegressPoint) []int64 {
	pos := make(map[int64]int64, len(points))
	for _, p := range points {
		pos[p.Seq] = max(pos[p.Seq], p.BuildPosition)
	}
	seqs := make([]int64, 0, len(pos))
	for q := range pos {
		seqs = append(seqs, q)
	}
	slices.Sort(seqs)
	key := make(map[int64]int64, len(seqs))
	var carry int64
	for _, q := range seqs {
		if pos[q] > 0 {
			key[q] = pos[q]
		} else {
			key[q] = carry
		}
		carry = max(carry, pos[q])
	}
	slices.SortStableFunc(seqs, func(a, b int64) int { return cmp.Compare(key[a], key[b]) })
	return seqs
}

// sortByBuild sorts points (in seq then recording order) into build
// order (BuildOrder), keeping the recording order of a seq's reruns.
func sortByBuild(points []RegressPoint) {
	rank := make(map[int64]int, len(points))
	for i, q := range BuildOrder(points) {
		rank[q] = i
	}
	slices.SortStableFunc(points, func(a, b RegressPoint) int { return cmp.Compare(rank[a.Seq], rank[b.Seq]) })
}
