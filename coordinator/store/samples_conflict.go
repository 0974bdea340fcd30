package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/lesfarm/lesfarm/protocol"
)

// stagedConflicts returns the indices into batches of the staged batches
// (sample_batches_in, after its rows were moved into sample_batches with
// ON CONFLICT DO NOTHING) whose (run, seq) is stored with other content.
// keep lists the accepted batches (nil: all); the staging table holds the
// accepted batches with samples, in that order (encodeSampleCopy), which
// its physical order keeps: it is emptied at every commit and only
// appended to.
//
// A redelivered batch is byte for byte the first copy and is not a
// conflict; a batch re-sent with the same seq and other samples is, and it
// was not stored: telemetry is written once (docs/protocol.md).
func stagedConflicts(ctx context.Context, tx pgx.Tx, batches []*protocol.TelemetryBatch, keep []int) ([]int, error) {
	var staged []int
	add := func(k int) {
		if len(batches[k].Samples) > 0 {
			staged = append(staged, k)
		}
	}
	if keep == nil {
		for k := range batches {
			add(k)
		}
	} else {
		for _, k := range keep {
			add(k)
		}
	}
	rows, err := tx.Query(ctx, `SELECT ROW(i.*) IS DISTINCT FROM ROW(b.*)
		FROM sample_batches_in i JOIN sample_batches b ON b.run_id = i.run_id AND b.seq = i.seq ORDER BY i.ctid`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []int
	n := 0
	for rows.Next() {
		var differs bool
		if err := rows.Scan(&differs); err != nil {
			return nil, err
		}
		if n >= len(staged) {
			return nil, fmt.Errorf("store: %d staged telemetry rows, %d batches staged", n+1, len(staged))
		}
		if differs {
			out = append(out, staged[n])
		}
		n++
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if n != len(staged) {
		return nil, fmt.Errorf("store: %d staged telemetry rows, %d batches staged", n, len(staged))
	}
	return out, nil
}
