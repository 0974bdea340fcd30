package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lesfarm/lesfarm/jobs"
)

// This file holds the A/B gate's comparisons (tables ab_comparisons and
// ab_runs, migration 00060): creating one with its first rounds of
// interleaved runs, and adding rounds. ab_read.go reads them.

// AB states and sides.
const (
	ABRunning = "running"
	ABDone    = "done"
	ABSideA   = "a" // the baseline
	ABSideB   = "b" // the build under test
)

// ErrNoABDevices is returned by CreateAB when no online, undrained device
// matching the selector can run both builds.
var ErrNoABDevices = errors.New("store: no online device matching the selector can run both builds")

// ABComparison is one A/B comparison of Build (B, under test) with
// Baseline (A) of one lineage on a fixed set of devices.
type ABComparison struct {
	ID                int64      `json:"id"`
	Suite             string     `json:"suite"`
	Build             string     `json:"build"`
	Baseline          string     `json:"baseline"`
	Lineage           string     `json:"lineage"`
	JobID             int64      `json:"job_id"`
	TriggerID         int64      `json:"trigger_id"`
	BaselineTriggerID int64      `json:"baseline_trigger_id"`
	Devices           []string   `json:"devices"`
	MinEffect         float64    `json:"min_effect"`
	InitialRounds     int        `json:"initial_rounds"`
	StepRounds        int        `json:"step_rounds"`
	MaxRounds         int        `json:"max_rounds"`
	Rounds            int        `json:"rounds"`
	State             string     `json:"state"`
	Verdict           string     `json:"verdict"`
	Decision          []byte     `json:"decision,omitempty"`
	CreatedAt         time.Time  `json:"created_at"`
	UpdatedAt         time.Time  `json:"updated_at"`
	FinishedAt        *time.Time `json:"finished_at,omitempty"`
}

// CreateABParams asks for a comparison. Spec, Build and Baseline are
// required; the rounds must satisfy 1 ≤ InitialRounds ≤ MaxRounds and
// StepRounds ≥ 1, and 0 < MinEffect < 1.
type CreateABParams struct {
	Spec      *jobs.Spec
	Build     string
	GitSHA    string
	Baseline  string
	Lineage   string
	Selector  *jobs.Selector
	MinEffect float64
	// InitialRounds are created at once; StepRounds are added by
	// AddABRounds while the answer is unknown, up to MaxRounds.
	InitialRounds, StepRounds, MaxRounds int
}

// CreateAB creates the comparison, its two triggers (source "ab") and its
// first InitialRounds rounds of runs, in one transaction. Its devices are
// every online, undrained device matching the selector that can run both
// builds (an executable for its platform, or its embedded build);
// ErrNoABDevices when there is none. Each device gets its runs pinned in
// ABBA order over rounds (round 0 A then B, round 1 B then A, …), all
// queued at once so a device takes them in id order.
func (s *Store) CreateAB(ctx context.Context, p *CreateABParams) (*ABComparison, []Run, error) {
	if p.Build == "" || p.Baseline == "" {
		return nil, nil, errors.New("store: create ab: build and baseline are required")
	}
	if !(p.MinEffect > 0 && p.MinEffect < 1) || p.InitialRounds < 1 || p.StepRounds < 1 || p.MaxRounds < p.InitialRounds {
		return nil, nil, fmt.Errorf("store: create ab: bad budget (min effect %v, rounds %d/%d/%d)", p.MinEffect, p.InitialRounds, p.StepRounds, p.MaxRounds)
	}
	in, err := triggerInputOf(&CreateRunsParams{Spec: p.Spec, Build: p.Build, Lineage: p.Lineage, Selector: p.Selector, Source: "ab"})
	if err != nil {
		return nil, nil, err
	}
	var ab *ABComparison
	var runs []Run
	err = s.tx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, deferNotifySQL); err != nil {
			return err
		}
		jobID, err := putJobID(ctx, tx, p.Spec, in.spec, p.Spec.Fingerprint())
		if err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT d.id FROM devices d WHERE d.state = 'online' AND NOT d.drained AND `+
			selectorSQL("$1", "$2", "$3", "$4", "$5")+` AND `+abRunnableSQL("$6")+` AND `+abRunnableSQL("$7")+` ORDER BY d.id`,
			nullIfEmpty(in.sel.Platform), nullIfEmpty(in.sel.DeviceModel), int64(in.sel.MinRAM), in.sel.Emulated, in.labels, p.Build, p.Baseline)
		if err != nil {
			return fmt.Errorf("store: ab devices: %w", err)
		}
		devices, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return fmt.Errorf("store: ab devices: %w", err)
		}
		if len(devices) == 0 {
			return ErrNoABDevices
		}
		trig := func(build, sha string) (int64, error) {
			var id int64
			err := tx.QueryRow(ctx, `INSERT INTO triggers (suite, job_id, build, git_sha, device_selector, fanout, source, lineage)
				VALUES ($1, $2, $3, coalesce(nullif($4, ''), (SELECT git_sha FROM builds WHERE id = $3), ''), $5, true, 'ab', $6) RETURNING id`,
				p.Spec.SuiteName(), jobID, build, sha, in.selJSON, in.lineage).Scan(&id)
			return id, err
		}
		ab = &ABComparison{Suite: p.Spec.SuiteName(), Build: p.Build, Baseline: p.Baseline, Lineage: in.lineage, JobID: jobID,
			Devices: devices, MinEffect: p.MinEffect, InitialRounds: p.InitialRounds, StepRounds: p.StepRounds, MaxRounds: p.MaxRounds, State: ABRunning}
		if ab.TriggerID, err = trig(p.Build, p.GitSHA); err != nil {
			return fmt.Errorf("store: ab trigger: %w", err)
		}
		if ab.BaselineTriggerID, err = trig(p.Baseline, ""); err != nil {
			return fmt.Errorf("store: ab trigger: %w", err)
		}
		if err := tx.QueryRow(ctx, `INSERT INTO ab_comparisons (suite, build, baseline, lineage, job_id, trigger_id, baseline_trigger_id,
				devices, min_effect, initial_rounds, step_rounds, max_rounds, rounds)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $10) RETURNING id, created_at, updated_at`,
			ab.Suite, ab.Build, ab.Baseline, ab.Lineage, jobID, ab.TriggerID, ab.BaselineTriggerID, devices, ab.MinEffect,
			ab.InitialRounds, ab.StepRounds, ab.MaxRounds).Scan(&ab.ID, &ab.CreatedAt, &ab.UpdatedAt); err != nil {
			return fmt.Errorf("store: create ab: %w", err)
		}
		runs, err = insertABRounds(ctx, tx, ab, p.Spec, in, 0, p.InitialRounds)
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	ab.Rounds = p.InitialRounds
	s.notifyRuns(ctx, runs)
	return ab, runs, nil
}

// abRunnableSQL is true for a device d that can run build param: it is not
// registered (a label; any device runs it embedded), or has an executable
// for d's exec platform, or is d's embedded build (buildRunnableSQL's rule).
func abRunnableSQL(param string) string {
	return `(NOT EXISTS (SELECT 1 FROM builds b WHERE b.id = ` + param + `)
		OR EXISTS (SELECT 1 FROM build_executables e WHERE e.build_id = ` + param + ` AND e.kind = 'exec'
			AND e.platform = coalesce(d.fingerprint->>'exec_platform', ''))
		OR (coalesce(d.fingerprint->>'embedded_build', '') = ` + param + `
			AND EXISTS (SELECT 1 FROM builds b WHERE b.id = ` + param + ` AND b.kind = 'embedded')))`
}

// insertABRounds inserts rounds from..from+k-1 of ab: per round and
// device, the two runs in ABBA order (even rounds A first).
func insertABRounds(ctx context.Context, tx pgx.Tx, ab *ABComparison, spec *jobs.Spec, in *triggerInput, from, k int) ([]Run, error) {
	var runs []Run
	for round := from; round < from+k; round++ {
		sides := []string{ABSideA, ABSideB}
		if round%2 == 1 {
			sides = []string{ABSideB, ABSideA}
		}
		for _, dev := range ab.Devices {
			for _, side := range sides {
				build, trig := ab.Build, ab.TriggerID
				if side == ABSideA {
					build, trig = ab.Baseline, ab.BaselineTriggerID
				}
				r, err := scanRun(tx.QueryRow(ctx, `WITH ins AS (INSERT INTO runs AS r (trigger_id, job_id, suite, build, git_sha, device_selector,
						sel_platform, sel_device_model, sel_min_ram, sel_emulated, sel_labels, target_device_id,
						priority, max_attempts, retry_on_failure, timeout_ms, lineage)
					SELECT t.id, t.job_id, t.suite, t.build, t.git_sha, t.device_selector, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, t.lineage
					FROM triggers t WHERE t.id = $1 AND t.build = $2
					RETURNING r.*), ab AS (INSERT INTO ab_runs (run_id, ab_id, round, side, device_id)
					SELECT id, $13, $14, $15, $8 FROM ins)
					SELECT `+runCols+` FROM ins AS r`,
					trig, build, nullIfEmpty(in.sel.Platform), nullIfEmpty(in.sel.DeviceModel), int64(in.sel.MinRAM), in.sel.Emulated,
					in.labels, dev, spec.Priority, spec.Retry.MaxAttempts, spec.Retry.OnFailure, spec.Timeout.D().Milliseconds(),
					ab.ID, round, side))
				if err != nil {
					return nil, fmt.Errorf("store: ab run: %w", err)
				}
				runs = append(runs, *r)
			}
		}
	}
	return runs, nil
}

// AddABRounds adds k rounds to comparison id when it has exactly have
// rounds and is running (so concurrent callers that saw the same rounds
// add them once): it returns the new runs, or none when another caller
// already added them or the comparison is done. The total never passes
// its max_rounds.
func (s *Store) AddABRounds(ctx context.Context, id int64, have, k int) ([]Run, error) {
	var runs []Run
	err := s.tx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, deferNotifySQL); err != nil {
			return err
		}
		ab, err := scanAB(tx.QueryRow(ctx, `SELECT `+abCols+` FROM ab_comparisons WHERE id = $1 FOR UPDATE`, id))
		if err != nil {
			return err
		}
		k = min(k, ab.MaxRounds-ab.Rounds)
		if ab.State != ABRunning || ab.Rounds != have || k <= 0 {
			return nil
		}
		j, err := s.GetJob(ctx, ab.JobID)
		if err != nil {
			return err
		}
		var selJSON []byte
		if err := tx.QueryRow(ctx, `SELECT device_selector FROM triggers WHERE id = $1`, ab.TriggerID).Scan(&selJSON); err != nil {
			return fmt.Errorf("store: ab trigger: %w", err)
		}
		var sel jobs.Selector
		if err := jsonUnmarshal(selJSON, &sel); err != nil {
			return err
		}
		in := &triggerInput{sel: sel, labels: sel.Labels}
		if in.labels == nil {
			in.labels = map[string]string{}
		}
		if runs, err = insertABRounds(ctx, tx, ab, &j.Spec, in, ab.Rounds, k); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE ab_comparisons SET rounds = rounds + $2, updated_at = now() WHERE id = $1`, id, k)
		return err
	})
	if err != nil {
		return nil, err
	}
	s.notifyRuns(ctx, runs)
	return runs, nil
}

// FinishAB stores the decision of a running comparison (verdict one of
// regression, improvement, same, unknown, failed; decision its JSON) and
// marks it done. A comparison already done is left as it is (ErrConflict).
func (s *Store) FinishAB(ctx context.Context, id int64, verdict string, decision []byte) error {
	tag, err := s.pool.Exec(ctx, `UPDATE ab_comparisons SET state = 'done', verdict = $2, decision = $3, updated_at = now(), finished_at = now()
		WHERE id = $1 AND state = 'running'`, id, verdict, decision)
	if err != nil {
		return fmt.Errorf("store: finish ab: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return ErrConflict
	}
	return nil
}

// SetABDecision stores the latest decision of a running comparison
// without finishing it (what the gate knows so far).
func (s *Store) SetABDecision(ctx context.Context, id int64, decision []byte) error {
	_, err := s.pool.Exec(ctx, `UPDATE ab_comparisons SET decision = $2, updated_at = now() WHERE id = $1 AND state = 'running'`, id, decision)
	return err
}
