package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// abCols are ab_comparisons' columns for scanAB.
const abCols = `id, suite, build, baseline, lineage, job_id, trigger_id, baseline_trigger_id, devices, min_effect,
	initial_rounds, step_rounds, max_rounds, rounds, state, verdict, decision, created_at, updated_at, finished_at`

func scanAB(row pgx.Row) (*ABComparison, error) {
	var a ABComparison
	err := row.Scan(&a.ID, &a.Suite, &a.Build, &a.Baseline, &a.Lineage, &a.JobID, &a.TriggerID, &a.BaselineTriggerID, &a.Devices,
		&a.MinEffect, &a.InitialRounds, &a.StepRounds, &a.MaxRounds, &a.Rounds, &a.State, &a.Verdict, &a.Decision,
		&a.CreatedAt, &a.UpdatedAt, &a.FinishedAt)
	if err != nil {
		return nil, notFound(err)
	}
	return &a, nil
}

// GetAB returns comparison id, or ErrNotFound.
func (s *Store) GetAB(ctx context.Context, id int64) (*ABComparison, error) {
	return scanAB(s.pool.QueryRow(ctx, `SELECT `+abCols+` FROM ab_comparisons WHERE id = $1`, id))
}

// ABRun is one run of a comparison: its side, round and device.
type ABRun struct {
	RunID    int64  `json:"run_id"`
	Round    int    `json:"round"`
	Side     string `json:"side"`
	DeviceID string `json:"device_id"`
}

// ABRuns lists the runs of comparison id by round, device and run id.
func (s *Store) ABRuns(ctx context.Context, id int64) ([]ABRun, error) {
	rows, err := s.pool.Query(ctx, `SELECT run_id, round, side, device_id FROM ab_runs WHERE ab_id = $1 ORDER BY round, device_id, run_id`, id)
	if err != nil {
		return nil, fmt.Errorf("store: ab runs: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (ABRun, error) {
		var a ABRun
		return a, r.Scan(&a.RunID, &a.Round, &a.Side, &a.DeviceID)
	})
}

// ABSample is one valid result of a comparison's run: the per-run means
// of the metrics the gate decides on.
type ABSample struct {
	RunID      int64
	Round      int
	Side       string
	DeviceID   string
	ConfigKey  string
	DecodeTPS  float64
	PrefillTPS float64
	TTFTms     float64
}

// ABSamples returns the valid results of comparison id's runs.
func (s *Store) ABSamples(ctx context.Context, id int64) ([]ABSample, error) {
	rows, err := s.pool.Query(ctx, `SELECT a.run_id, a.round, a.side, a.device_id, r.config_key, r.decode_tps_mean, r.prefill_tps_mean, r.ttft_ms_mean
		FROM ab_runs a JOIN results r ON r.run_id = a.run_id
		WHERE a.ab_id = $1 AND r.valid AND r.error = '' ORDER BY a.round, a.device_id, r.config_index, a.run_id`, id)
	if err != nil {
		return nil, fmt.Errorf("store: ab samples: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (ABSample, error) {
		var a ABSample
		return a, r.Scan(&a.RunID, &a.Round, &a.Side, &a.DeviceID, &a.ConfigKey, &a.DecodeTPS, &a.PrefillTPS, &a.TTFTms)
	})
}

// PreviousBuildWithResults returns the newest build of build's lineage
// ordered before it that has a valid result in suite: the A/B gate's
// default baseline. ErrNotFound when build is not registered or no
// earlier build has results.
func (s *Store) PreviousBuildWithResults(ctx context.Context, build, suite string) (string, error) {
	var id string
	err := s.pool.QueryRow(ctx, `SELECT b.id FROM builds b JOIN builds me ON me.id = $1
		WHERE b.lineage = me.lineage AND b.position < me.position
		  AND EXISTS (SELECT 1 FROM results r WHERE r.build = b.id AND r.suite = $2 AND r.valid)
		ORDER BY b.position DESC LIMIT 1`, build, suite).Scan(&id)
	return id, notFound(err)
}

// ABPolicy is a suite's A/B budget: its minimum effect size and rounds
// (0: the defaults of abtest).
type ABPolicy struct {
	Suite                                string  `json:"suite"`
	MinEffect                            float64 `json:"min_effect"`
	InitialRounds, StepRounds, MaxRounds int
}

// GetABPolicy returns suite's stored policy, or ErrNotFound.
func (s *Store) GetABPolicy(ctx context.Context, suite string) (*ABPolicy, error) {
	p := ABPolicy{Suite: suite}
	err := s.pool.QueryRow(ctx, `SELECT min_effect, initial_rounds, step_rounds, max_rounds FROM ab_policies WHERE suite = $1`, suite).
		Scan(&p.MinEffect, &p.InitialRounds, &p.StepRounds, &p.MaxRounds)
	if err != nil {
		return nil, notFound(err)
	}
	return &p, nil
}

// SetABPolicy creates or replaces suite's policy; MinEffect must be in
// (0, 1) and the rounds non-negative.
func (s *Store) SetABPolicy(ctx context.Context, p *ABPolicy) error {
	if p.Suite == "" || !(p.MinEffect > 0 && p.MinEffect < 1) || p.InitialRounds < 0 || p.StepRounds < 0 || p.MaxRounds < 0 {
		return errors.New("store: ab policy: want a suite, 0 < min_effect < 1 and rounds ≥ 0")
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO ab_policies (suite, min_effect, initial_rounds, step_rounds, max_rounds) VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (suite) DO UPDATE SET min_effect = EXCLUDED.min_effect, initial_rounds = EXCLUDED.initial_rounds,
			step_rounds = EXCLUDED.step_rounds, max_rounds = EXCLUDED.max_rounds, updated_at = now()`,
		p.Suite, p.MinEffect, p.InitialRounds, p.StepRounds, p.MaxRounds)
	return err
}

// RunComparison returns the A/B comparison run id belongs to (a gate's or
// a bisection step's), or 0 when it belongs to none.
func (s *Store) RunComparison(ctx context.Context, id int64) (int64, error) {
	var ab int64
	err := s.pool.QueryRow(ctx, `SELECT ab_id FROM ab_runs WHERE run_id = $1`, id).Scan(&ab)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	return ab, err
}
