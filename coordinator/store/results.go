package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/lesfarm/lesfarm/protocol"
)

// CompleteRun records a run's Result. The result's token must be the run's
// current token and the run active; otherwise (a late report from a lost or
// superseded agent, or a cancelled run) it returns ErrStaleToken and writes
// nothing. The run becomes succeeded, failed or cancelled as the result says;
// a failed run whose spec retries failures is requeued while attempts
// remain. It returns the updated run.
func (s *Store) CompleteRun(ctx context.Context, res *protocol.Result) (*Run, error) {
	var out *Run
	err := s.tx(ctx, func(tx pgx.Tx) error {
		var r *Run
		r, err := scanRun(tx.QueryRow(ctx, `SELECT `+runCols+` FROM runs r WHERE r.id = $1 FOR UPDATE`, res.RunID))
		if err != nil {
			if errors.Is(err, ErrNotFound) {
				return ErrStaleToken
			}
			return err
		}
		if r.Token != res.Token || (r.State != RunAssigned && r.State != RunRunning) || r.DeviceID != res.DeviceID {
			return ErrStaleToken
		}
		var model, osv string
		var emulated bool
		if err := tx.QueryRow(ctx, `SELECT device_model, os_version, emulated FROM devices WHERE id = $1`, r.DeviceID).
			Scan(&model, &osv, &emulated); err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		batch := &pgx.Batch{}
		for i := range res.Configs {
			c := &res.Configs[i]
			stats, err := json.Marshal(c)
			if err != nil {
				return err
			}
			batch.Queue(`INSERT INTO results (run_id, config_index, config_key, suite, build, git_sha, device_id, device_model, os_version, emulated,
				decode_tps_mean, decode_tps_median, decode_tps_stddev, decode_tps_cv, prefill_tps_mean, prefill_tps_median, prefill_tps_stddev,
				ttft_ms_mean, ttft_ms_median, ttft_ms_stddev, peak_memory_bytes, hit_rate, predictor_recall, stall_fraction, bytes_per_token,
				repetitions, warmup, valid, invalid_reason, error, stats)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24, $25, $26, $27, $28, $29, $30, $31)
				ON CONFLICT (run_id, config_index) DO NOTHING`,
				r.ID, c.ConfigIndex, c.ConfigKey, r.Suite, r.Build, r.GitSHA, r.DeviceID, model, osv, emulated,
				c.DecodeTPS.Mean, c.DecodeTPS.Median, c.DecodeTPS.Stddev, c.DecodeTPS.CV, c.PrefillTPS.Mean, c.PrefillTPS.Median, c.PrefillTPS.Stddev,
				c.TTFTMS.Mean, c.TTFTMS.Median, c.TTFTMS.Stddev, c.PeakMemoryBytes, c.HitRate, c.PredictorRecall, c.StallFraction, c.BytesPerToken,
				c.Repetitions, c.Warmup, c.Valid, clipText(c.InvalidReason), clipText(c.Error), stats)
		}
		if err := tx.SendBatch(ctx, batch).Close(); err != nil {
			return err
		}
		final, outcome := RunSucceeded, "succeeded"
		switch res.Outcome {
		case protocol.OutcomeFailed:
			final, outcome = RunFailed, "failed"
		case protocol.OutcomeCancelled:
			final, outcome = RunCancelled, "cancelled"
		}
		requeue := final == RunFailed && r.RetryOnFailure && r.Attempts < r.MaxAttempts
		if err := endLease(ctx, tx, r.ID, r.Token, requeue, final, res.Error, outcome); err != nil {
			return err
		}
		if !requeue {
			if _, err := tx.Exec(ctx, `UPDATE runs SET progress = CASE WHEN $2 = 'succeeded' THEN 1 ELSE progress END WHERE id = $1`, r.ID, final); err != nil {
				return err
			}
		}
		out, err = scanRun(tx.QueryRow(ctx, `SELECT `+runCols+` FROM runs r WHERE r.id = $1`, r.ID))
		return err
	})
	if err != nil {
		if errors.Is(err, ErrStaleToken) {
			return nil, err
		}
		return nil, fmt.Errorf("store: complete run: %w", err)
	}
	return out, nil
}
