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
// nothing. A result that was already recorded gives ErrAlreadyCompleted
// with the run. The run becomes succeeded, failed or cancelled as the result says;
// a failed run whose spec retries failures is requeued while attempts
// remain. It returns the updated run.
//
// The run row is locked FOR NO KEY UPDATE, which does not wait for a
// telemetry transaction writing the same run (FOR KEY SHARE): a result
// usually arrives while its last batches are being copied. Only the
// requeue, which deletes the attempt's samples, takes FOR UPDATE.
func (s *Store) CompleteRun(ctx context.Context, res *protocol.Result) (*Run, error) {
	var out *Run
	err := s.tx(ctx, func(tx pgx.Tx) error {
		var model, osv string
		var emulated bool
		var state, deviceID, suite, build, gitSHA string
		var token int64
		var attempts, maxAttempts int
		var retryOnFailure bool
		err := tx.QueryRow(ctx, `SELECT r.state, coalesce(r.token, 0), coalesce(r.device_id, ''), r.suite, r.build, r.git_sha,
				r.attempts, r.max_attempts, r.retry_on_failure,
				coalesce(d.device_model, ''), coalesce(d.os_version, ''), coalesce(d.emulated, false)
			FROM runs r LEFT JOIN devices d ON d.id = r.device_id WHERE r.id = $1 FOR NO KEY UPDATE OF r`, res.RunID).
			Scan(&state, &token, &deviceID, &suite, &build, &gitSHA, &attempts, &maxAttempts, &retryOnFailure, &model, &osv, &emulated)
		if errors.Is(notFound(err), ErrNotFound) {
			return ErrStaleToken
		}
		if err != nil {
			return err
		}
		if token == res.Token && deviceID == res.DeviceID && TerminalState(state) && state == outcomeState(res.Outcome) {
			// This very result was committed before (a redelivery after a
			// crash between commit and ack).
			out, err = scanRun(tx.QueryRow(ctx, `SELECT `+runCols+` FROM runs r WHERE r.id = $1`, res.RunID))
			if err != nil {
				return err
			}
			return ErrAlreadyCompleted
		}
		if token != res.Token || (state != RunAssigned && state != RunRunning) || deviceID != res.DeviceID {
			return ErrStaleToken
		}
		final, outcome := RunSucceeded, "succeeded"
		switch res.Outcome {
		case protocol.OutcomeFailed:
			final, outcome = RunFailed, "failed"
		case protocol.OutcomeCancelled:
			final, outcome = RunCancelled, "cancelled"
		case protocol.OutcomeAborted:
			final, outcome = RunInfraFailed, "aborted"
		}
		requeue := (final == RunFailed && retryOnFailure || final == RunInfraFailed) && attempts < maxAttempts
		batch := &pgx.Batch{}
		// The run's notice goes out after the commit (notifyRuns).
		batch.Queue(deferNotifySQL)
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
				res.RunID, c.ConfigIndex, c.ConfigKey, suite, build, gitSHA, deviceID, model, osv, emulated,
				c.DecodeTPS.Mean, c.DecodeTPS.Median, c.DecodeTPS.Stddev, c.DecodeTPS.CV, c.PrefillTPS.Mean, c.PrefillTPS.Median, c.PrefillTPS.Stddev,
				c.TTFTMS.Mean, c.TTFTMS.Median, c.TTFTMS.Stddev, c.PeakMemoryBytes, c.HitRate, c.PredictorRecall, c.StallFraction, c.BytesPerToken,
				c.Repetitions, c.Warmup, c.Valid, clipText(c.InvalidReason), clipText(c.Error), stats)
		}
		if requeue {
			// Deleting the attempt's samples: take the lock that waits for
			// telemetry transactions in flight (FOR KEY SHARE, see
			// InsertTelemetry), which the common case does not need.
			if _, err := tx.Exec(ctx, `SELECT 1 FROM runs WHERE id = $1 FOR UPDATE`, res.RunID); err != nil {
				return err
			}
			if err := tx.SendBatch(ctx, batch).Close(); err != nil {
				return err
			}
			if err := endLease(ctx, tx, res.RunID, token, true, final, res.Error, outcome); err != nil {
				return err
			}
			out, err = scanRun(tx.QueryRow(ctx, `SELECT `+runCols+` FROM runs r WHERE r.id = $1`, res.RunID))
			return err
		}
		// Common case: results, lease release and the final state in one
		// round trip.
		batch.Queue(`UPDATE leases SET released_at = now(), outcome = $2 WHERE token = $1 AND released_at IS NULL`, token, outcome)
		batch.Queue(`UPDATE runs r SET state = $2, finished_at = now(), updated_at = now(), lease_expires_at = NULL, error = $3,
			progress = CASE WHEN $2 = 'succeeded' THEN 1 ELSE progress END
			WHERE r.id = $1 RETURNING `+runCols, res.RunID, final, clipText(res.Error))
		br := tx.SendBatch(ctx, batch)
		for range len(res.Configs) + 2 {
			if _, err := br.Exec(); err != nil {
				br.Close()
				return err
			}
		}
		out, err = scanRun(br.QueryRow())
		if err != nil {
			br.Close()
			return err
		}
		return br.Close()
	})
	if err != nil {
		if errors.Is(err, ErrAlreadyCompleted) {
			return out, err
		}
		if errors.Is(err, ErrStaleToken) {
			return nil, err
		}
		return nil, fmt.Errorf("store: complete run: %w", err)
	}
	s.notifyRuns(ctx, []Run{*out})
	return out, nil
}

// ErrAlreadyCompleted is returned by CompleteRun, with the run, when the
// same result (same token, device and outcome) was already recorded: a
// harmless redelivery.
var ErrAlreadyCompleted = errors.New("store: result already recorded")

// outcomeState maps a result outcome to the run state it leads to.
func outcomeState(outcome string) string {
	switch outcome {
	case protocol.OutcomeFailed:
		return RunFailed
	case protocol.OutcomeCancelled:
		return RunCancelled
	case protocol.OutcomeAborted:
		return RunInfraFailed
	}
	return RunSucceeded
}
