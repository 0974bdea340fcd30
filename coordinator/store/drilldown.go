package store

import (
	"context"
	"fmt"

	"github.com/lesfarm/lesfarm/protocol"
)

// TimelinePoint is one bucket of a run config's measured decode steps, in
// the order the device produced them (repetition, then step). A bucket of
// one step is that step; wider buckets sum their steps, so the per-token
// figures are exact averages over the bucket.
type TimelinePoint struct {
	// Index is the bucket's first decode step counted over the config's
	// measured repetitions (0-based); Steps is how many steps it holds.
	Index, Steps int
	// Repetition and Step locate the bucket's first step.
	Repetition, Step int
	Tokens           int64
	DurationNS       int64
	StallNS          int64
	BytesRead        int64
	// CacheBytes is the largest expert-cache size seen in the bucket.
	CacheBytes int64
	Hits       int64
	Misses     int64
}

// Timeline returns the measured decode steps of one config of a run,
// downsampled on the server to at most maxPoints buckets of consecutive
// steps (ntile over repetition, step), so a 2,000-token run stays small.
// Warm-up repetitions (repetition < 0) and prefill are left out. total is
// the number of steps before downsampling.
func (s *Store) Timeline(ctx context.Context, runID int64, config, maxPoints int) (pts []TimelinePoint, total int, err error) {
	if maxPoints < 1 {
		return nil, 0, fmt.Errorf("store: timeline of %d points", maxPoints)
	}
	rows, err := s.pool.Query(ctx, `SELECT min(n) - 1, count(*), (array_agg(repetition ORDER BY n))[1], (array_agg(step ORDER BY n))[1],
			sum(tokens), sum(duration_ns), sum(stall_ns), sum(bytes_read), max(cache_bytes), sum(hits_total), sum(misses_total), max(total)
		FROM (SELECT repetition, step, tokens, duration_ns, stall_ns, bytes_read, cache_bytes, hits_total, misses_total,
				row_number() OVER o AS n, count(*) OVER () AS total, ntile($3) OVER o AS b
			FROM samples WHERE run_id = $1 AND config_index = $2 AND repetition >= 0 AND phase = $4
			WINDOW o AS (ORDER BY repetition, step)) x
		GROUP BY b ORDER BY b`, runID, config, maxPoints, phaseCodes[protocol.PhaseDecode])
	if err != nil {
		return nil, 0, err
	}
	defer rows.Close()
	for rows.Next() {
		var p TimelinePoint
		var n int64
		if err := rows.Scan(&p.Index, &p.Steps, &p.Repetition, &p.Step, &p.Tokens, &p.DurationNS, &p.StallNS, &p.BytesRead,
			&p.CacheBytes, &p.Hits, &p.Misses, &n); err != nil {
			return nil, 0, err
		}
		total = int(n)
		pts = append(pts, p)
	}
	return pts, total, rows.Err()
}

// LayerTotals are one layer's expert counts summed over a config's
// measured decode steps.
type LayerTotals struct {
	Layer                                      int
	Hits, Misses, PrefetchUsed, PrefetchWasted int64
}

// LayerTotals sums the per-layer counts of one config's measured decode
// steps (warm-up and prefill left out). Steps whose per-layer detail the
// agent dropped are not counted; steps reports how many were.
func (s *Store) LayerTotals(ctx context.Context, runID int64, config int) (out []LayerTotals, steps int, err error) {
	rows, err := s.pool.Query(ctx, `SELECT layers FROM samples WHERE run_id = $1 AND config_index = $2 AND repetition >= 0
		AND phase = $3 AND layers IS NOT NULL`, runID, config, phaseCodes[protocol.PhaseDecode])
	if err != nil {
		return nil, 0, err
	}
	defer rows.Close()
	for rows.Next() {
		var b []byte
		if err := rows.Scan(&b); err != nil {
			return nil, 0, err
		}
		lc := UnpackLayers(b)
		if lc == nil {
			continue
		}
		steps++
		for len(out) < len(lc.Hits) {
			out = append(out, LayerTotals{Layer: len(out)})
		}
		for l := range lc.Hits {
			t := &out[l]
			t.Hits += int64(lc.Hits[l])
			t.Misses += int64(lc.Misses[l])
			t.PrefetchUsed += int64(lc.PrefetchUsed[l])
			t.PrefetchWasted += int64(lc.PrefetchWasted[l])
		}
	}
	return out, steps, rows.Err()
}
