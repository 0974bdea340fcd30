package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/lesfarm/lesfarm/protocol"
)

// TelemetryStats reports what InsertTelemetry did.
type TelemetryStats struct {
	// Batches and Samples are what was accepted (current token); Inserted
	// is the number of new rows (duplicates of stored rows are skipped).
	Batches  int
	Samples  int
	Inserted int64
	// Stale lists the indices (into the argument) of batches rejected
	// because their token is not the run's current token (or their device
	// is not the run's device).
	Stale []int
	// Duplicates is true when some sample was already stored and the
	// deduplicating path was taken.
	Duplicates bool
	// Conflicts lists the indices (ascending, into the argument) of
	// batches that were not stored because the same (run, seq) is stored
	// with other content: a batch is written once, and a re-send that
	// differs is refused, never a replacement (samples_conflict.go).
	Conflicts []int
	// ExpertRows is the number of new expert_load rows (expertload.go).
	ExpertRows int64
}

var phaseCodes = map[string]int16{protocol.PhasePrefill: 1, protocol.PhaseDecode: 2, protocol.PhaseVerify: 3}

// InsertTelemetry stores telemetry batches in one transaction, one
// sample_batches row per batch (migration 00030): it encodes the rows for
// COPY first, then checks each batch's token against its run, locking the
// runs FOR KEY SHARE, then COPYs the accepted batches. The lock makes a
// concurrent requeue (every path that clears a token and deletes a run's
// samples locks the run FOR UPDATE first) wait and then delete what was
// stored, so a stale attempt's samples never outlive its requeue; it does
// not conflict with the plain UPDATEs of lease renewals, acks and progress
// (FOR NO KEY UPDATE), which a FOR SHARE lock made wait for the whole COPY.
// The COPY goes straight into sample_batches; when that hits a unique
// violation (a redelivered batch) it rolls back to a savepoint, COPYs into
// a session temp table and moves the rows into sample_batches with ON
// CONFLICT DO NOTHING, so duplicates are harmless and the common case
// costs one COPY. When it returns nil the rows are committed.
func (s *Store) InsertTelemetry(ctx context.Context, batches []*protocol.TelemetryBatch) (*TelemetryStats, error) {
	st := &TelemetryStats{}
	if len(batches) == 0 {
		return st, nil
	}
	runIDs := make([]int64, 0, len(batches))
	seen := map[int64]bool{}
	for _, b := range batches {
		if !seen[b.RunID] {
			seen[b.RunID] = true
			runIDs = append(runIDs, b.RunID)
		}
	}
	enc := encodeSampleCopy(batches)
	defer putSampleCopy(enc)
	err := s.tx(ctx, func(tx pgx.Tx) error {
		st.Batches, st.Samples, st.Inserted, st.Stale, st.Duplicates, st.Conflicts = 0, 0, 0, nil, false, nil
		rows, err := tx.Query(ctx, `SELECT id, token, coalesce(device_id, '') FROM runs WHERE id = ANY($1) AND token IS NOT NULL
			ORDER BY id FOR KEY SHARE`, runIDs)
		if err != nil {
			return err
		}
		type lease struct {
			token  int64
			device string
		}
		current := map[int64]lease{}
		for rows.Next() {
			var id int64
			var l lease
			if err := rows.Scan(&id, &l.token, &l.device); err != nil {
				rows.Close()
				return err
			}
			current[id] = l
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		var accepted []*protocol.TelemetryBatch
		var keep []int // indexes of accepted batches; nil while all are
		for i, b := range batches {
			if l, ok := current[b.RunID]; !ok || l.token != b.Token || l.device != b.DeviceID {
				if keep == nil {
					keep = make([]int, 0, len(batches))
					for k := range i {
						keep = append(keep, k)
					}
				}
				st.Stale = append(st.Stale, i)
				continue
			}
			if keep != nil {
				keep = append(keep, i)
			}
			accepted = append(accepted, b)
			st.Batches++
			st.Samples += len(b.Samples)
		}
		if s.telemetryHeld != nil {
			s.telemetryHeld()
		}
		if st.ExpertRows, err = insertExpertLoad(ctx, tx, accepted); err != nil {
			return err
		}
		if st.Samples == 0 {
			return nil
		}
		data := enc.data(keep)
		// Fast path: COPY straight into sample_batches. A redelivered batch
		// makes it fail with a unique violation; then roll back to the
		// savepoint and take the staging path, where duplicates are skipped.
		if !s.noFastCopy.Load() {
			sp, err := tx.Begin(ctx)
			if err != nil {
				return err
			}
			err = copySampleBatches(ctx, sp.Conn().PgConn(), "sample_batches", data)
			if err == nil {
				if err := sp.Commit(ctx); err != nil {
					return err
				}
				st.Inserted = int64(st.Samples)
				return nil
			}
			if !isUniqueViolation(err) {
				return err
			}
			if err := sp.Rollback(ctx); err != nil {
				return err
			}
			st.Duplicates = true
		}
		if _, err := tx.Exec(ctx, `CREATE TEMP TABLE IF NOT EXISTS sample_batches_in (LIKE sample_batches) ON COMMIT DELETE ROWS`); err != nil {
			return err
		}
		if err := copySampleBatches(ctx, tx.Conn().PgConn(), "sample_batches_in", data); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `WITH ins AS (INSERT INTO sample_batches SELECT * FROM sample_batches_in ON CONFLICT DO NOTHING RETURNING n)
			SELECT coalesce(sum(n), 0) FROM ins`).Scan(&st.Inserted); err != nil {
			return err
		}
		st.Conflicts, err = stagedConflicts(ctx, tx, batches, keep)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("store: insert telemetry: %w", err)
	}
	return st, nil
}

func sum32(v []int32) int32 {
	var n int32
	for _, x := range v {
		n += x
	}
	return n
}

// PackLayers appends the samples.layers encoding of l to buf (4 x L
// little-endian uint16: hits, misses, prefetch used, prefetch wasted;
// counts above 65535 saturate) and returns the packed bytes (a subslice)
// and the grown buffer. The bytes stay valid until buf is reused.
func PackLayers(buf []byte, l *protocol.LayerCounts) ([]byte, []byte) {
	start := len(buf)
	for _, arr := range [][]int32{l.Hits, l.Misses, l.PrefetchUsed, l.PrefetchWasted} {
		for _, v := range arr {
			u := uint16(min(max(v, 0), 65535))
			buf = append(buf, byte(u), byte(u>>8))
		}
	}
	return buf[start:len(buf):len(buf)], buf
}

// UnpackLayers decodes a samples.layers value.
func UnpackLayers(b []byte) *protocol.LayerCounts {
	if len(b) == 0 || len(b)%8 != 0 {
		return nil
	}
	n := len(b) / 8
	arr := make([]int32, 4*n)
	for i := range arr {
		arr[i] = int32(b[2*i]) | int32(b[2*i+1])<<8
	}
	return &protocol.LayerCounts{Hits: arr[:n:n], Misses: arr[n : 2*n : 2*n], PrefetchUsed: arr[2*n : 3*n : 3*n], PrefetchWasted: arr[3*n:]}
}

// CountSamples returns the number of stored samples of a run.
func (s *Store) CountSamples(ctx context.Context, runID int64) (int64, error) {
	var n int64
	err := s.pool.QueryRow(ctx, `SELECT coalesce(sum(n), 0) FROM sample_batches WHERE run_id = $1`, runID).Scan(&n)
	return n, err
}

// SampleKeys returns the (seq, idx) keys of a run's samples, ordered, for
// exactly-once checks in tests and tools.
func (s *Store) SampleKeys(ctx context.Context, runID int64) ([][2]int, error) {
	rows, err := s.pool.Query(ctx, `SELECT seq, generate_series(0, n - 1) FROM sample_batches WHERE run_id = $1 ORDER BY 1, 2`, runID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out [][2]int
	for rows.Next() {
		var k [2]int
		if err := rows.Scan(&k[0], &k[1]); err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	return out, rows.Err()
}
