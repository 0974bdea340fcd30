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
// remain. It returns the updated run. It is CompleteRuns of one result.
func (s *Store) CompleteRun(ctx context.Context, res *protocol.Result) (*Run, error) {
	outs, err := s.CompleteRuns(ctx, []*protocol.Result{res})
	if err != nil {
		return nil, err
	}
	return outs[0].Run, outs[0].Err
}

// ResultOutcome is what CompleteRuns did with one result: Err is nil (Run
// is the updated run), ErrAlreadyCompleted (Run is the run as recorded)
// or ErrStaleToken (Run is nil, nothing was written for it).
type ResultOutcome struct {
	Run *Run
	Err error
}

// CompleteRuns records many results in one transaction of a few
// statements, with CompleteRun's rules for each one: a result whose token,
// device or run state does not match is rejected as stale (ErrStaleToken in
// its outcome) without affecting the others, and a result recorded before
// gives ErrAlreadyCompleted. The outcomes are in the order of results. A
// run listed twice is settled by its first result, and the later ones in
// a following transaction (where they are stale or already completed). An
// error means nothing of the transaction was committed.
//
// The run rows are locked FOR NO KEY UPDATE, in id order (so concurrent
// batches never deadlock), which does not wait for a telemetry transaction
// writing the same run (FOR KEY SHARE): a result usually arrives while its
// last batches are being copied. Only a requeue, which deletes the
// attempt's samples, takes FOR UPDATE. The runs' notices go out after the
// commit.
func (s *Store) CompleteRuns(ctx context.Context, results []*protocol.Result) ([]ResultOutcome, error) {
	outs := make([]ResultOutcome, len(results))
	pending := make([]int, len(results))
	for i := range pending {
		pending[i] = i
	}
	for len(pending) > 0 {
		now, later := firstOfEachRun(results, pending)
		batch := make([]*protocol.Result, len(now))
		for k, i := range now {
			batch[k] = results[i]
		}
		var got []ResultOutcome
		err := s.tx(ctx, func(tx pgx.Tx) error {
			var err error
			got, _, err = s.completeIn(ctx, tx, batch, nil)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("store: complete run: %w", err)
		}
		var notices []Run
		for k, i := range now {
			outs[i] = got[k]
			if got[k].Err == nil {
				notices = append(notices, *got[k].Run)
			}
		}
		s.notifyRunsLater(ctx, notices)
		pending = later
	}
	return outs, nil
}

// firstOfEachRun splits pending (indexes of results) into the first
// result of each run (now, settled in one transaction) and the repeats
// (later, settled in a following one).
func firstOfEachRun(results []*protocol.Result, pending []int) (now, later []int) {
	seen := map[int64]bool{}
	for _, i := range pending {
		if seen[results[i].RunID] {
			later = append(later, i)
			continue
		}
		seen[results[i].RunID] = true
		now = append(now, i)
	}
	return now, later
}

// resultRow is a run's row as a result's check needs it.
type resultRow struct {
	state, deviceID, suite, build, gitSHA string
	token                                 int64
	attempts, maxAttempts                 int
	retryOnFailure                        bool
	model, osVersion                      string
	emulated                              bool
	// buildKind is the run's build's kind ("" when not registered) and
	// buildExes its executables as "platform sha256" (checkProvenance).
	buildKind string
	buildExes []string
}

// completeIn writes results of distinct runs in tx, CompleteRuns' work
// for one transaction. With p set, it also returns the freed devices'
// placement read (its snap nil when there is nothing to place;
// BeginCompleteRuns).
func (s *Store) completeIn(ctx context.Context, tx pgx.Tx, results []*protocol.Result, p *FreedParams) ([]ResultOutcome, placeRead, error) {
	ids := make([]int64, len(results))
	for i, r := range results {
		ids[i] = r.RunID
	}
	outs := make([]ResultOutcome, len(results))
	rowsByID, err := lockResultRuns(ctx, tx, ids)
	if err != nil {
		return nil, placeRead{}, err
	}
	var done configRows
	var already, requeues []int
	var upIDs, upTokens []int64
	var upStates, upOutcomes, upErrs, upProv []string
	for i, res := range results {
		row, ok := rowsByID[res.RunID]
		switch {
		case !ok:
			outs[i].Err = ErrStaleToken
			continue
		case row.token == res.Token && row.deviceID == res.DeviceID && TerminalState(row.state) && row.state == outcomeState(res.Outcome):
			// This very result was committed before (a redelivery
			// after a crash between commit and ack).
			outs[i].Err = ErrAlreadyCompleted
			already = append(already, i)
			continue
		case row.token != res.Token || (row.state != RunAssigned && row.state != RunRunning) || row.deviceID != res.DeviceID:
			outs[i].Err = ErrStaleToken
			continue
		}
		if why := checkProvenance(res, &row); why != "" {
			res = rejectedResult(res, why)
			results[i] = res
		}
		final, outcome := finalState(res.Outcome)
		if (final == RunFailed && row.retryOnFailure || final == RunInfraFailed) && row.attempts < row.maxAttempts {
			requeues = append(requeues, i)
			continue
		}
		if err := done.add(res, &row); err != nil {
			return nil, placeRead{}, err
		}
		upIDs, upTokens = append(upIDs, res.RunID), append(upTokens, res.Token)
		upStates, upOutcomes, upErrs = append(upStates, final), append(upOutcomes, outcome), append(upErrs, clipText(res.Error))
		upProv = append(upProv, provenanceJSON(res.Provenance))
	}
	for _, i := range requeues {
		// Deleting the attempt's samples: take the lock that waits for
		// telemetry transactions in flight (FOR KEY SHARE, see
		// InsertTelemetry), which the common case does not need. The
		// requeue deletes the attempt's results, so none are written.
		res := results[i]
		final, outcome := finalState(res.Outcome)
		if _, err := tx.Exec(ctx, `SELECT 1 FROM runs WHERE id = $1 FOR UPDATE`, res.RunID); err != nil {
			return nil, placeRead{}, err
		}
		if err := endLease(ctx, tx, res.RunID, res.Token, true, final, res.Error, outcome); err != nil {
			return nil, placeRead{}, err
		}
		already = append(already, i) // read back below
	}
	// The freed devices' placement read goes in finishBatch's round
	// trip (BeginCompleteRuns).
	read, tail := placementTail(results, outs, p)
	if err := finishBatch(ctx, tx, results, outs, &done, already, upIDs, upTokens, upStates, upOutcomes, upErrs, upProv, tail); err != nil {
		return nil, placeRead{}, err
	}
	freed, err := freedSnapshot(ctx, tx, read)
	if err != nil {
		return nil, placeRead{}, err
	}
	return outs, freed, nil
}

// lockResultRuns locks the runs ids FOR NO KEY UPDATE in id order and
// reads what a result's check needs, with its device's facts.
func lockResultRuns(ctx context.Context, tx pgx.Tx, ids []int64) (map[int64]resultRow, error) {
	rows, err := tx.Query(ctx, `SELECT r.id, r.state, coalesce(r.token, 0), coalesce(r.device_id, ''), r.suite, r.build, r.git_sha,
			r.attempts, r.max_attempts, r.retry_on_failure,
			coalesce(d.device_model, ''), coalesce(d.os_version, ''), coalesce(d.emulated, false),
			coalesce((SELECT b.kind FROM builds b WHERE b.id = r.build), ''),
			array(SELECT e.platform || ' ' || e.sha256 FROM build_executables e WHERE e.build_id = r.build)
		FROM runs r LEFT JOIN devices d ON d.id = r.device_id WHERE r.id = ANY($1) ORDER BY r.id FOR NO KEY UPDATE OF r`, ids)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make(map[int64]resultRow, len(ids))
	for rows.Next() {
		var id int64
		var w resultRow
		if err := rows.Scan(&id, &w.state, &w.token, &w.deviceID, &w.suite, &w.build, &w.gitSHA, &w.attempts, &w.maxAttempts,
			&w.retryOnFailure, &w.model, &w.osVersion, &w.emulated, &w.buildKind, &w.buildExes); err != nil {
			return nil, err
		}
		out[id] = w
	}
	return out, rows.Err()
}

// finishBatch writes the results' configs, releases the leases and ends
// the runs of the common case in one round trip, and reads back the runs
// of the already-completed and requeued results (outs[i].Run for i in
// reread).
//
// tail, when set, queues more statements after these in the same round
// trip; the reader it returns is called with their results once the batch's
// own are read (not when those fail).
func finishBatch(ctx context.Context, tx pgx.Tx, results []*protocol.Result, outs []ResultOutcome, done *configRows,
	reread []int, ids, tokens []int64, states, outcomes, errs, provs []string, tail func(*pgx.Batch) func(pgx.BatchResults)) error {
	b := &pgx.Batch{}
	// The runs' notices go out after the commit (notifyRuns).
	b.Queue(deferNotifySQL)
	nexec := 1
	if len(done.runID) > 0 {
		done.queue(b)
		nexec++
	}
	if len(ids) > 0 {
		b.Queue(`UPDATE leases l SET released_at = now(), outcome = u.outcome
			FROM unnest($1::bigint[], $2::text[]) AS u(token, outcome) WHERE l.token = u.token AND l.released_at IS NULL`, tokens, outcomes)
		nexec++
		b.Queue(`UPDATE runs r SET state = u.state, finished_at = now(), updated_at = now(), lease_expires_at = NULL, error = u.err,
				progress = CASE WHEN u.state = 'succeeded' THEN 1 ELSE r.progress END, provenance = nullif(u.prov, '')::jsonb
			FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[]) AS u(id, state, err, prov)
			WHERE r.id = u.id RETURNING `+runCols, ids, states, errs, provs)
	}
	var rereadIDs []int64
	for _, i := range reread {
		rereadIDs = append(rereadIDs, results[i].RunID)
	}
	if len(rereadIDs) > 0 {
		b.Queue(`SELECT `+runCols+` FROM runs r WHERE r.id = ANY($1)`, rereadIDs)
	}
	var readTail func(pgx.BatchResults)
	if tail != nil {
		readTail = tail(b)
	}
	br := tx.SendBatch(ctx, b)
	defer br.Close()
	for range nexec {
		if _, err := br.Exec(); err != nil {
			return err
		}
	}
	byID := map[int64]*Run{}
	if len(ids) > 0 {
		ended, err := collectRuns(br.Query())
		if err != nil {
			return err
		}
		if len(ended) != len(ids) {
			return fmt.Errorf("ended %d of %d runs", len(ended), len(ids))
		}
		for k := range ended {
			byID[ended[k].ID] = &ended[k]
		}
	}
	if len(rereadIDs) > 0 {
		runs, err := collectRuns(br.Query())
		if err != nil {
			return err
		}
		for k := range runs {
			byID[runs[k].ID] = &runs[k]
		}
	}
	if readTail != nil {
		readTail(br)
	}
	for i := range outs {
		if errors.Is(outs[i].Err, ErrStaleToken) {
			continue
		}
		r, ok := byID[results[i].RunID]
		if !ok {
			return fmt.Errorf("run %d not read back", results[i].RunID)
		}
		outs[i].Run = r
	}
	return br.Close()
}

// configRows are the results rows of a batch, column by column, for one
// INSERT over unnest.
type configRows struct {
	runID                                                    []int64
	index, repetitions, warmup                               []int32
	key, suite, build, gitSHA, deviceID, model, osv          []string
	invalidReason, errText, stats, exeSHA                    []string
	emulated, valid                                          []bool
	dMean, dMedian, dStddev, dCV, pMean, pMedian, pStddev    []float64
	tMean, tMedian, tStddev, hitRate, recall, stall, perByte []float64
	peak                                                     []int64
}

func (c *configRows) add(res *protocol.Result, row *resultRow) error {
	for k := range res.Configs {
		cf := &res.Configs[k]
		stats, err := json.Marshal(cf)
		if err != nil {
			return err
		}
		c.runID = append(c.runID, res.RunID)
		c.index, c.repetitions, c.warmup = append(c.index, int32(cf.ConfigIndex)), append(c.repetitions, int32(cf.Repetitions)), append(c.warmup, int32(cf.Warmup))
		c.key, c.suite, c.build, c.gitSHA = append(c.key, cf.ConfigKey), append(c.suite, row.suite), append(c.build, row.build), append(c.gitSHA, row.gitSHA)
		c.deviceID, c.model, c.osv = append(c.deviceID, row.deviceID), append(c.model, row.model), append(c.osv, row.osVersion)
		c.invalidReason, c.errText, c.stats = append(c.invalidReason, clipText(cf.InvalidReason)), append(c.errText, clipText(cf.Error)), append(c.stats, string(stats))
		c.emulated, c.valid = append(c.emulated, row.emulated), append(c.valid, cf.Valid)
		exe := ""
		if res.Provenance != nil {
			exe = res.Provenance.ExecutableSHA256
		}
		c.exeSHA = append(c.exeSHA, exe)
		c.dMean, c.dMedian, c.dStddev, c.dCV = append(c.dMean, cf.DecodeTPS.Mean), append(c.dMedian, cf.DecodeTPS.Median), append(c.dStddev, cf.DecodeTPS.Stddev), append(c.dCV, cf.DecodeTPS.CV)
		c.pMean, c.pMedian, c.pStddev = append(c.pMean, cf.PrefillTPS.Mean), append(c.pMedian, cf.PrefillTPS.Median), append(c.pStddev, cf.PrefillTPS.Stddev)
		c.tMean, c.tMedian, c.tStddev = append(c.tMean, cf.TTFTMS.Mean), append(c.tMedian, cf.TTFTMS.Median), append(c.tStddev, cf.TTFTMS.Stddev)
		c.peak, c.hitRate, c.recall = append(c.peak, cf.PeakMemoryBytes), append(c.hitRate, cf.HitRate), append(c.recall, cf.PredictorRecall)
		c.stall, c.perByte = append(c.stall, cf.StallFraction), append(c.perByte, cf.BytesPerToken)
	}
	return nil
}

// queue adds the INSERT of every row to b.
func (c *configRows) queue(b *pgx.Batch) {
	b.Queue(`INSERT INTO results (run_id, config_index, config_key, suite, build, git_sha, device_id, device_model, os_version, emulated,
			decode_tps_mean, decode_tps_median, decode_tps_stddev, decode_tps_cv, prefill_tps_mean, prefill_tps_median, prefill_tps_stddev,
			ttft_ms_mean, ttft_ms_median, ttft_ms_stddev, peak_memory_bytes, hit_rate, predictor_recall, stall_fraction, bytes_per_token,
			repetitions, warmup, valid, invalid_reason, error, stats, executable_sha256)
		SELECT run_id, config_index, config_key, suite, build, git_sha, device_id, device_model, os_version, emulated,
			decode_tps_mean, decode_tps_median, decode_tps_stddev, decode_tps_cv, prefill_tps_mean, prefill_tps_median, prefill_tps_stddev,
			ttft_ms_mean, ttft_ms_median, ttft_ms_stddev, peak_memory_bytes, hit_rate, predictor_recall, stall_fraction, bytes_per_token,
			repetitions, warmup, valid, invalid_reason, error, stats::jsonb, executable_sha256
		FROM unnest($1::bigint[], $2::int[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[], $10::bool[],
			$11::float8[], $12::float8[], $13::float8[], $14::float8[], $15::float8[], $16::float8[], $17::float8[],
			$18::float8[], $19::float8[], $20::float8[], $21::bigint[], $22::float8[], $23::float8[], $24::float8[], $25::float8[],
			$26::int[], $27::int[], $28::bool[], $29::text[], $30::text[], $31::text[], $32::text[])
			AS u(run_id, config_index, config_key, suite, build, git_sha, device_id, device_model, os_version, emulated,
			decode_tps_mean, decode_tps_median, decode_tps_stddev, decode_tps_cv, prefill_tps_mean, prefill_tps_median, prefill_tps_stddev,
			ttft_ms_mean, ttft_ms_median, ttft_ms_stddev, peak_memory_bytes, hit_rate, predictor_recall, stall_fraction, bytes_per_token,
			repetitions, warmup, valid, invalid_reason, error, stats, executable_sha256)
		ON CONFLICT (run_id, config_index) DO NOTHING`,
		c.runID, c.index, c.key, c.suite, c.build, c.gitSHA, c.deviceID, c.model, c.osv, c.emulated,
		c.dMean, c.dMedian, c.dStddev, c.dCV, c.pMean, c.pMedian, c.pStddev,
		c.tMean, c.tMedian, c.tStddev, c.peak, c.hitRate, c.recall, c.stall, c.perByte,
		c.repetitions, c.warmup, c.valid, c.invalidReason, c.errText, c.stats, c.exeSHA)
}

// ErrAlreadyCompleted is returned by CompleteRun, with the run, when the
// same result (same token, device and outcome) was already recorded: a
// harmless redelivery.
var ErrAlreadyCompleted = errors.New("store: result already recorded")

// finalState is the state a result's outcome ends its run in, and the
// outcome recorded on its lease.
func finalState(outcome string) (state, leaseOutcome string) {
	switch outcome {
	case protocol.OutcomeFailed:
		return RunFailed, "failed"
	case protocol.OutcomeCancelled:
		return RunCancelled, "cancelled"
	case protocol.OutcomeAborted:
		return RunInfraFailed, "aborted"
	case protocol.OutcomeBuildFailed:
		return RunBuildFailed, "build_failed"
	}
	return RunSucceeded, "succeeded"
}

// outcomeState maps a result outcome to the run state it leads to.
func outcomeState(outcome string) string {
	s, _ := finalState(outcome)
	return s
}

// provenanceJSON is p's JSON for runs.provenance, "" (stored as NULL) for
// nil.
func provenanceJSON(p *protocol.Provenance) string {
	if p == nil {
		return ""
	}
	b, err := json.Marshal(p)
	if err != nil {
		return ""
	}
	return string(b)
}
