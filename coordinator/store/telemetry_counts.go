package store

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/jackc/pgx/v5"
)

// TelemetrySent is what a run attempt's result says its agent sent
// (migration 00051).
type TelemetrySent struct {
	RunID, Token                   int64
	Batches, Samples, DroppedBatch uint64
}

// RecordTelemetrySent records the sent counts of results, once per
// attempt (a redelivered result changes nothing).
func (s *Store) RecordTelemetrySent(ctx context.Context, sent []TelemetrySent) error {
	if len(sent) == 0 {
		return nil
	}
	ids, tokens := make([]int64, len(sent)), make([]int64, len(sent))
	batches, samples, dropped := make([]int64, len(sent)), make([]int64, len(sent)), make([]int64, len(sent))
	for k, t := range sent {
		ids[k], tokens[k] = t.RunID, t.Token
		batches[k], samples[k], dropped[k] = clampCount(t.Batches), clampCount(t.Samples), clampCount(t.DroppedBatch)
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO run_telemetry (run_id, token, batches_sent, samples_sent, dropped)
		SELECT u.* FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bigint[], $5::bigint[]) AS u(run_id, token, b, s, d)
		WHERE EXISTS (SELECT 1 FROM runs r WHERE r.id = u.run_id)
		ON CONFLICT (run_id, token) DO NOTHING`, ids, tokens, batches, samples, dropped)
	if err != nil {
		return fmt.Errorf("store: record telemetry sent: %w", err)
	}
	return nil
}

func clampCount(v uint64) int64 { return int64(min(v, math.MaxInt64)) }

// RunSamples is a run's current token and its stored samples.
type RunSamples struct {
	Token, Stored int64
}

// StoredSamples returns, for each run of ids that exists, its current
// token (0 when it has none) and the samples stored for it, in one query.
func (s *Store) StoredSamples(ctx context.Context, ids []int64) (map[int64]RunSamples, error) {
	rows, err := s.pool.Query(ctx, `SELECT r.id, coalesce(r.token, 0),
			coalesce((SELECT sum(b.n) FROM sample_batches b WHERE b.run_id = r.id), 0)::bigint
		FROM runs r WHERE r.id = ANY($1)`, ids)
	if err != nil {
		return nil, fmt.Errorf("store: stored samples: %w", err)
	}
	defer rows.Close()
	out := make(map[int64]RunSamples, len(ids))
	for rows.Next() {
		var id int64
		var rs RunSamples
		if err := rows.Scan(&id, &rs.Token, &rs.Stored); err != nil {
			return nil, fmt.Errorf("store: stored samples: %w", err)
		}
		out[id] = rs
	}
	return out, rows.Err()
}

// RunTelemetry is a run attempt's telemetry accounting: what its result
// said was sent (Reported false until a result came) and what is stored.
type RunTelemetry struct {
	Reported                          bool
	BatchesSent, SamplesSent, Dropped int64
	SamplesStored, BatchesStored      int64
}

// GetRunTelemetry returns the telemetry accounting of run id's attempt
// with fencing token token.
func (s *Store) GetRunTelemetry(ctx context.Context, id, token int64) (*RunTelemetry, error) {
	var t RunTelemetry
	err := s.pool.QueryRow(ctx, `SELECT coalesce(sum(n), 0)::bigint, count(*) FROM sample_batches WHERE run_id = $1`, id).Scan(&t.SamplesStored, &t.BatchesStored)
	if err != nil {
		return nil, fmt.Errorf("store: run telemetry: %w", err)
	}
	err = s.pool.QueryRow(ctx, `SELECT batches_sent, samples_sent, dropped FROM run_telemetry WHERE run_id = $1 AND token = $2`, id, token).
		Scan(&t.BatchesSent, &t.SamplesSent, &t.Dropped)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return nil, fmt.Errorf("store: run telemetry: %w", err)
	default:
		t.Reported = true
	}
	return &t, nil
}
