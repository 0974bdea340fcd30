package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lesfarm/lesfarm/jobs"
)

// This file holds bisections (tables bisections and bisection_steps,
// migration 00064; coordinator/bisect drives them): creating one, its
// steps (each an A/B comparison of its own, pinned to one device, at the
// bisection's priority), the device time its runs took, and the reads the
// search needs (the builds of a lineage range, the devices of a model).

// BisectionRunning is the state of a bisection that has not ended.
const BisectionRunning = "running"

// BisectionSource is the trigger source of a bisection's runs: they are
// stored like any run, marked by their trigger (source "bisect:<id>") and
// by bisection_steps → ab_runs.
const BisectionSource = "bisect"

// ErrBisectionRunning is returned by CreateBisection when a bisection of
// the group is running; Bisection.ID in the *BisectionRunningError names
// it.
var ErrBisectionRunning = errors.New("store: a bisection of this alert group is running")

// BisectionRunningError wraps ErrBisectionRunning with the running one.
type BisectionRunningError struct{ ID int64 }

func (e *BisectionRunningError) Error() string {
	return fmt.Sprintf("%v: bisection %d", ErrBisectionRunning, e.ID)
}

// Unwrap returns ErrBisectionRunning.
func (e *BisectionRunningError) Unwrap() error { return ErrBisectionRunning }

// Bisection is one bisection of an alert group (see migration 00064).
type Bisection struct {
	ID          int64    `json:"id"`
	GroupID     int64    `json:"group_id"`
	AlertID     int64    `json:"alert_id"`
	Suite       string   `json:"suite"`
	Lineage     string   `json:"lineage"`
	Config      string   `json:"config"`
	Metric      string   `json:"metric"`
	Configs     []string `json:"configs"`
	DeviceModel string   `json:"device_model"`
	Emulated    bool     `json:"emulated"`
	// DeviceID is the device the current (or last) step runs on.
	DeviceID string `json:"device_id"`
	JobID    int64  `json:"job_id"`
	Budget   time.Duration
	// DeviceTime is the device time its runs took so far; Runs counts
	// those that finished.
	DeviceTime time.Duration
	Runs       int
	State      string `json:"state"`
	// Search is the coordinator/bisect.Search state, as JSON.
	Search        []byte `json:"search"`
	Reason        string `json:"reason"`
	LastGoodBuild string `json:"last_good_build"`
	LastGoodSHA   string `json:"last_good_sha"`
	FirstBadBuild string `json:"first_bad_build"`
	FirstBadSHA   string `json:"first_bad_sha"`
	RequestedBy   string `json:"requested_by"`
	CreatedAt     time.Time
	UpdatedAt     time.Time
	FinishedAt    *time.Time
}

const bisectionCols = `id, group_id, alert_id, suite, lineage, config, metric, configs, device_model, emulated, device_id, job_id,
	budget_ms, device_ms, runs, state, search, reason, last_good_build, last_good_sha, first_bad_build, first_bad_sha,
	requested_by, created_at, updated_at, finished_at`

func scanBisection(row pgx.Row) (*Bisection, error) {
	var b Bisection
	var budget, device int64
	err := row.Scan(&b.ID, &b.GroupID, &b.AlertID, &b.Suite, &b.Lineage, &b.Config, &b.Metric, &b.Configs, &b.DeviceModel, &b.Emulated,
		&b.DeviceID, &b.JobID, &budget, &device, &b.Runs, &b.State, &b.Search, &b.Reason, &b.LastGoodBuild, &b.LastGoodSHA,
		&b.FirstBadBuild, &b.FirstBadSHA, &b.RequestedBy, &b.CreatedAt, &b.UpdatedAt, &b.FinishedAt)
	if err != nil {
		return nil, notFound(err)
	}
	b.Budget, b.DeviceTime = time.Duration(budget)*time.Millisecond, time.Duration(device)*time.Millisecond
	return &b, nil
}

// CreateBisectionParams describe a new bisection. Spec is the job its
// steps run (already restricted to Configs, at its priority).
type CreateBisectionParams struct {
	GroupID, AlertID int64
	Suite, Lineage   string
	Config, Metric   string
	Configs          []string
	DeviceModel      string
	Emulated         bool
	DeviceID         string
	Spec             *jobs.Spec
	Budget           time.Duration
	Search           []byte
	RequestedBy      string
}

// CreateBisection stores a running bisection of the group; a running one
// of the same group makes it a *BisectionRunningError (the database's
// unique index decides, so two concurrent requests get one each).
func (s *Store) CreateBisection(ctx context.Context, p *CreateBisectionParams) (*Bisection, error) {
	if p.Spec == nil || p.Budget <= 0 || len(p.Search) == 0 {
		return nil, errors.New("store: create bisection: spec, budget and search are required")
	}
	if err := p.Spec.Validate(); err != nil {
		return nil, err
	}
	js, err := p.Spec.MarshalCanonical()
	if err != nil {
		return nil, err
	}
	var b *Bisection
	err = s.tx(ctx, func(tx pgx.Tx) error {
		jobID, err := putJobID(ctx, tx, p.Spec, js, p.Spec.Fingerprint())
		if err != nil {
			return err
		}
		b, err = scanBisection(tx.QueryRow(ctx, `INSERT INTO bisections (group_id, alert_id, suite, lineage, config, metric, configs,
				device_model, emulated, job_id, budget_ms, search, requested_by, device_id)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14) RETURNING `+bisectionCols,
			p.GroupID, p.AlertID, p.Suite, p.Lineage, p.Config, p.Metric, p.Configs, p.DeviceModel, p.Emulated, jobID,
			p.Budget.Milliseconds(), p.Search, clipText(p.RequestedBy), p.DeviceID))
		return err
	})
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "23505" {
		var id int64
		if e := s.pool.QueryRow(ctx, `SELECT id FROM bisections WHERE group_id = $1 AND state = 'running'`, p.GroupID).Scan(&id); e != nil {
			return nil, &BisectionRunningError{}
		}
		return nil, &BisectionRunningError{ID: id}
	}
	if err != nil {
		return nil, fmt.Errorf("store: create bisection: %w", err)
	}
	return b, nil
}

// GetBisection returns bisection id, or ErrNotFound.
func (s *Store) GetBisection(ctx context.Context, id int64) (*Bisection, error) {
	return scanBisection(s.pool.QueryRow(ctx, `SELECT `+bisectionCols+` FROM bisections WHERE id = $1`, id))
}

// LatestBisection returns the newest bisection of alert group gid, or
// ErrNotFound.
func (s *Store) LatestBisection(ctx context.Context, gid int64) (*Bisection, error) {
	return scanBisection(s.pool.QueryRow(ctx, `SELECT `+bisectionCols+` FROM bisections WHERE group_id = $1 ORDER BY id DESC LIMIT 1`, gid))
}

// RunningBisections returns the ids of the running bisections, oldest
// first.
func (s *Store) RunningBisections(ctx context.Context) ([]int64, error) {
	rows, err := s.pool.Query(ctx, `SELECT id FROM bisections WHERE state = 'running' ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("store: running bisections: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[int64])
}

// UpdateBisectionParams is what an advance of a bisection writes.
type UpdateBisectionParams struct {
	ID         int64
	Search     []byte
	State      string
	Reason     string
	DeviceID   string
	DeviceTime time.Duration
	Runs       int
	// LastGood and FirstBad (and their shas) are set with state culprit.
	LastGoodBuild, LastGoodSHA, FirstBadBuild, FirstBadSHA string
}

// UpdateBisection stores a running bisection's new search state (and, for
// a state other than running, its end, queueing its webhook delivery when
// the suite's regression policy has a URL). A bisection that already
// ended is left as it is (ErrConflict).
func (s *Store) UpdateBisection(ctx context.Context, p *UpdateBisectionParams) error {
	return s.tx(ctx, func(tx pgx.Tx) error {
		if err := updateBisection(ctx, tx, p); err != nil {
			return err
		}
		if p.State == BisectionRunning {
			return nil
		}
		return enqueueBisectionWebhook(ctx, tx, p.ID)
	})
}

func updateBisection(ctx context.Context, tx pgx.Tx, p *UpdateBisectionParams) error {
	tag, err := tx.Exec(ctx, `UPDATE bisections SET search = $2, state = $3, reason = $4, device_id = $5, device_ms = $6, runs = $7,
			last_good_build = $8, last_good_sha = $9, first_bad_build = $10, first_bad_sha = $11, updated_at = now(),
			finished_at = CASE WHEN $3 = 'running' THEN NULL ELSE now() END
		WHERE id = $1 AND state = 'running'`, p.ID, p.Search, p.State, clipText(p.Reason), p.DeviceID, p.DeviceTime.Milliseconds(), p.Runs,
		p.LastGoodBuild, p.LastGoodSHA, p.FirstBadBuild, p.FirstBadSHA)
	if err != nil {
		return fmt.Errorf("store: update bisection: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return ErrConflict
	}
	return nil
}

// WithBisectionLock runs fn while holding bisection id's advisory lock,
// so one caller at a time (of any coordinator) advances it; it returns
// false without running fn when another holds it. The lock lives in a
// transaction on a connection of its own; fn uses the store as usual.
func (s *Store) WithBisectionLock(ctx context.Context, id int64, fn func() error) (bool, error) {
	ran := false
	err := s.tx(ctx, func(tx pgx.Tx) error {
		var ok bool
		if err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock(hashtextextended('lesfarm.bisect', $1))`, id).Scan(&ok); err != nil {
			return err
		}
		if !ok {
			return nil
		}
		ran = true
		return fn()
	})
	return ran, err
}

// BisectionStep is one step of a bisection: an A/B comparison of build A
// (the baseline side) with build B on one device.
type BisectionStep struct {
	BisectionID int64      `json:"bisection_id"`
	Step        int        `json:"step"`
	Kind        string     `json:"kind"`
	AIndex      int        `json:"a_index"`
	BIndex      int        `json:"b_index"`
	BuildA      string     `json:"build_a"`
	BuildB      string     `json:"build_b"`
	ABID        int64      `json:"ab_id"`
	DeviceID    string     `json:"device_id"`
	State       string     `json:"state"`
	Judgement   string     `json:"judgement"`
	Evidence    []byte     `json:"evidence,omitempty"`
	Note        string     `json:"note"`
	CreatedAt   time.Time  `json:"created_at"`
	FinishedAt  *time.Time `json:"finished_at,omitempty"`
	// Rounds is the comparison's rounds so far (from ab_comparisons).
	Rounds int `json:"rounds"`
}

// Bisection step states.
const (
	StepRunning = "running"
	StepDone    = "done"
	StepAborted = "aborted"
)

const stepCols = `s.bisection_id, s.step, s.kind, s.a_index, s.b_index, s.build_a, s.build_b, s.ab_id, s.device_id, s.state,
	s.judgement, s.evidence, s.note, s.created_at, s.finished_at, a.rounds`

func scanStep(row pgx.Row) (*BisectionStep, error) {
	var st BisectionStep
	err := row.Scan(&st.BisectionID, &st.Step, &st.Kind, &st.AIndex, &st.BIndex, &st.BuildA, &st.BuildB, &st.ABID, &st.DeviceID,
		&st.State, &st.Judgement, &st.Evidence, &st.Note, &st.CreatedAt, &st.FinishedAt, &st.Rounds)
	if err != nil {
		return nil, notFound(err)
	}
	return &st, nil
}

// BisectionSteps lists bisection id's steps in order.
func (s *Store) BisectionSteps(ctx context.Context, id int64) ([]BisectionStep, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+stepCols+` FROM bisection_steps s JOIN ab_comparisons a ON a.id = s.ab_id
		WHERE s.bisection_id = $1 ORDER BY s.step`, id)
	if err != nil {
		return nil, fmt.Errorf("store: bisection steps: %w", err)
	}
	defer rows.Close()
	var out []BisectionStep
	for rows.Next() {
		st, err := scanStep(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, *st)
	}
	return out, rows.Err()
}

// StartBisectionStepParams ask for a bisection's next step: builds A and
// B (indexes AIndex and BIndex of its search) compared on DeviceID, its
// first Rounds rounds queued at once (ABBA order), up to MaxRounds.
type StartBisectionStepParams struct {
	Bisection      *Bisection
	Kind           string
	AIndex, BIndex int
	BuildA, BuildB string
	DeviceID       string
	MinEffect      float64
	Rounds         int
	StepRounds     int
	MaxRounds      int
	Note           string
}

// StartBisectionStep creates the step's A/B comparison (two triggers of
// source "bisect:<id>", pinned to the device, at the bisection job's
// priority) with its first rounds and the step row, in one transaction.
// It fails with ErrConflict when the bisection already has a running step
// or has ended (a concurrent advance won).
func (s *Store) StartBisectionStep(ctx context.Context, p *StartBisectionStepParams) (*BisectionStep, []Run, error) {
	b := p.Bisection
	if p.Rounds < 1 || p.StepRounds < 1 || p.MaxRounds < p.Rounds || !(p.MinEffect > 0 && p.MinEffect < 1) {
		return nil, nil, fmt.Errorf("store: bisection step: bad budget (min effect %v, rounds %d/%d/%d)", p.MinEffect, p.Rounds, p.StepRounds, p.MaxRounds)
	}
	j, err := s.GetJob(ctx, b.JobID)
	if err != nil {
		return nil, nil, err
	}
	in, err := triggerInputOf(&CreateRunsParams{Spec: &j.Spec, Lineage: b.Lineage, Selector: &jobs.Selector{},
		Source: fmt.Sprintf("%s:%d", BisectionSource, b.ID)})
	if err != nil {
		return nil, nil, err
	}
	var step *BisectionStep
	var runs []Run
	err = s.tx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, deferNotifySQL); err != nil {
			return err
		}
		var state string
		var n int
		if err := tx.QueryRow(ctx, `SELECT state, (SELECT count(*) FROM bisection_steps WHERE bisection_id = $1 AND state = 'running')
			FROM bisections WHERE id = $1 FOR UPDATE`, b.ID).Scan(&state, &n); err != nil {
			return notFound(err)
		}
		if state != BisectionRunning || n > 0 {
			return ErrConflict
		}
		trig := func(build string) (int64, error) {
			var id int64
			err := tx.QueryRow(ctx, `INSERT INTO triggers (suite, job_id, build, git_sha, device_selector, fanout, source, lineage)
				VALUES ($1, $2, $3, coalesce((SELECT git_sha FROM builds WHERE id = $3), ''), $4, true, $5, $6) RETURNING id`,
				b.Suite, b.JobID, build, in.selJSON, in.source, in.lineage).Scan(&id)
			return id, err
		}
		ab := &ABComparison{Suite: b.Suite, Build: p.BuildB, Baseline: p.BuildA, Lineage: in.lineage, JobID: b.JobID,
			Devices: []string{p.DeviceID}, MinEffect: p.MinEffect, InitialRounds: p.Rounds, StepRounds: p.StepRounds, MaxRounds: p.MaxRounds, State: ABRunning}
		var err error
		if ab.TriggerID, err = trig(p.BuildB); err != nil {
			return fmt.Errorf("store: bisection trigger: %w", err)
		}
		if ab.BaselineTriggerID, err = trig(p.BuildA); err != nil {
			return fmt.Errorf("store: bisection trigger: %w", err)
		}
		if err := tx.QueryRow(ctx, `INSERT INTO ab_comparisons (suite, build, baseline, lineage, job_id, trigger_id, baseline_trigger_id,
				devices, min_effect, initial_rounds, step_rounds, max_rounds, rounds)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $10) RETURNING id, created_at, updated_at`,
			ab.Suite, ab.Build, ab.Baseline, ab.Lineage, ab.JobID, ab.TriggerID, ab.BaselineTriggerID, ab.Devices, ab.MinEffect,
			ab.InitialRounds, ab.StepRounds, ab.MaxRounds).Scan(&ab.ID, &ab.CreatedAt, &ab.UpdatedAt); err != nil {
			return fmt.Errorf("store: bisection comparison: %w", err)
		}
		if runs, err = insertABRounds(ctx, tx, ab, &j.Spec, in, 0, p.Rounds); err != nil {
			return err
		}
		step, err = scanStep(tx.QueryRow(ctx, `WITH ins AS (INSERT INTO bisection_steps (bisection_id, step, kind, a_index, b_index, build_a, build_b, ab_id, device_id, note)
				SELECT $1, coalesce(max(step), 0) + 1, $2, $3, $4, $5, $6, $7, $8, $9 FROM bisection_steps WHERE bisection_id = $1
				RETURNING *)
			SELECT `+stepCols+` FROM ins s JOIN ab_comparisons a ON a.id = s.ab_id`,
			b.ID, p.Kind, p.AIndex, p.BIndex, p.BuildA, p.BuildB, ab.ID, p.DeviceID, clipText(p.Note)))
		if err != nil {
			return fmt.Errorf("store: bisection step: %w", err)
		}
		step.Rounds = p.Rounds
		_, err = tx.Exec(ctx, `UPDATE bisections SET device_id = $2, updated_at = now() WHERE id = $1`, b.ID, p.DeviceID)
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	s.notifyRuns(ctx, runs)
	return step, runs, nil
}

// FinishBisectionStep ends a running step as done (with its judgement and
// evidence) or aborted (note says why), and marks its comparison done
// with verdict. ErrConflict when the step is not running.
func (s *Store) FinishBisectionStep(ctx context.Context, bisectionID int64, step int, state, judgement, verdict string, evidence []byte, note string) error {
	return s.tx(ctx, func(tx pgx.Tx) error {
		var abID int64
		err := tx.QueryRow(ctx, `UPDATE bisection_steps SET state = $3, judgement = $4, evidence = $5,
				note = CASE WHEN $6 = '' THEN note ELSE $6 END, finished_at = now()
			WHERE bisection_id = $1 AND step = $2 AND state = 'running' RETURNING ab_id`,
			bisectionID, step, state, judgement, evidence, clipText(note)).Scan(&abID)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrConflict
		}
		if err != nil {
			return fmt.Errorf("store: finish bisection step: %w", err)
		}
		_, err = tx.Exec(ctx, `UPDATE ab_comparisons SET state = 'done', verdict = $2, decision = $3, updated_at = now(), finished_at = now()
			WHERE id = $1 AND state = 'running'`, abID, verdict, evidence)
		return err
	})
}

// SetBisectionStepNote replaces a running step's note (what it waits
// for).
func (s *Store) SetBisectionStepNote(ctx context.Context, bisectionID int64, step int, note string) error {
	_, err := s.pool.Exec(ctx, `UPDATE bisection_steps SET note = $3 WHERE bisection_id = $1 AND step = $2 AND state = 'running'`,
		bisectionID, step, clipText(note))
	return err
}

// BisectionDeviceTime returns the device time bisection id's runs took:
// each run's started to finished time (until now while it runs), and how
// many of them finished with a time.
func (s *Store) BisectionDeviceTime(ctx context.Context, id int64) (time.Duration, int, error) {
	var ms float64
	var n int
	err := s.pool.QueryRow(ctx, `SELECT coalesce(sum(extract(epoch FROM coalesce(r.finished_at, now()) - r.started_at)) * 1000, 0),
			count(*) FILTER (WHERE r.finished_at IS NOT NULL)
		FROM bisection_steps s JOIN ab_runs a ON a.ab_id = s.ab_id JOIN runs r ON r.id = a.run_id
		WHERE s.bisection_id = $1 AND r.started_at IS NOT NULL`, id).Scan(&ms, &n)
	if err != nil {
		return 0, 0, fmt.Errorf("store: bisection device time: %w", err)
	}
	return time.Duration(ms) * time.Millisecond, n, nil
}

// ABBisection returns the bisection that owns A/B comparison abID, or 0
// when a trigger (POST /v1/runs) created it.
func (s *Store) ABBisection(ctx context.Context, abID int64) (int64, error) {
	var id int64
	err := s.pool.QueryRow(ctx, `SELECT bisection_id FROM bisection_steps WHERE ab_id = $1`, abID).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	return id, err
}

// RunInComparison reports whether run id belongs to an A/B comparison (a
// gate's or a bisection's): such runs are stored like any run but never
// become points of the regression series.
func (s *Store) RunInComparison(ctx context.Context, id int64) (bool, error) {
	var in bool
	err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM ab_runs WHERE run_id = $1)`, id).Scan(&in)
	return in, err
}

// LineageBuildsBetween returns the builds of lineage whose positions are
// in [from, to], in order, with their executables.
func (s *Store) LineageBuildsBetween(ctx context.Context, lineage string, from, to int64) ([]Build, error) {
	return s.queryBuilds(ctx, "lineage builds", `SELECT `+buildCols+` FROM builds b
		WHERE b.lineage = $1 AND b.position BETWEEN $2 AND $3 ORDER BY b.position`, lineage, from, to)
}

// BisectionDevicesParams select the devices a bisection may run on.
type BisectionDevicesParams struct {
	DeviceModel string
	Emulated    bool
	// Builds must all be runnable on the device (an executable for its
	// platform, or its embedded build).
	Builds []string
}

// BisectionDevices returns the online, undrained devices of the model
// (case-insensitive) and kind that can run every one of p.Builds, by id.
func (s *Store) BisectionDevices(ctx context.Context, p *BisectionDevicesParams) ([]Device, error) {
	q := `SELECT ` + deviceCols + ` FROM devices d WHERE d.state = 'online' AND NOT d.drained
		AND lower(d.device_model) = lower($1) AND d.emulated = $2`
	args := []any{p.DeviceModel, p.Emulated}
	for _, b := range p.Builds {
		args = append(args, b)
		q += ` AND ` + abRunnableSQL(fmt.Sprintf("$%d", len(args)))
	}
	rows, err := s.pool.Query(ctx, q+` ORDER BY d.id`, args...)
	if err != nil {
		return nil, fmt.Errorf("store: bisection devices: %w", err)
	}
	defer rows.Close()
	var out []Device
	for rows.Next() {
		d, err := scanDevice(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, *d)
	}
	return out, rows.Err()
}

// AlertPoint is what the series point of an alert at one seq came from.
type AlertPoint struct {
	Build    string
	RunID    int64
	DeviceID string
	JobID    int64
}

// AlertPointAt returns the newest point of series seriesID at seq with
// its run's device and job (RunID 0 when the point's run is unknown), or
// ErrNotFound.
func (s *Store) AlertPointAt(ctx context.Context, seriesID, seq int64) (*AlertPoint, error) {
	var p AlertPoint
	err := s.pool.QueryRow(ctx, `SELECT p.build, coalesce(r.id, 0), coalesce(r.device_id, ''), coalesce(r.job_id, 0)
		FROM regress_points p LEFT JOIN runs r ON r.id = CASE WHEN p.run_key ~ '^[0-9]{1,18}$' THEN p.run_key::bigint END
		WHERE p.series_id = $1 AND p.seq = $2 ORDER BY p.recorded_at DESC LIMIT 1`, seriesID, seq).
		Scan(&p.Build, &p.RunID, &p.DeviceID, &p.JobID)
	if err != nil {
		return nil, notFound(err)
	}
	return &p, nil
}

// BuildBefore returns the build of the newest point of series seriesID
// before seq whose build is not build, or ErrNotFound: the last good build
// of an alert recorded without a location range.
func (s *Store) BuildBefore(ctx context.Context, seriesID, seq int64, build string) (string, error) {
	var b string
	err := s.pool.QueryRow(ctx, `SELECT build FROM regress_points WHERE series_id = $1 AND seq < $2 AND build <> '' AND build <> $3
		ORDER BY seq DESC, recorded_at DESC LIMIT 1`, seriesID, seq, build).Scan(&b)
	return b, notFound(err)
}

// BisectionRunStates counts bisection id's runs by step comparison (ab
// id) and state.
func (s *Store) BisectionRunStates(ctx context.Context, id int64) (map[int64]map[string]int, error) {
	rows, err := s.pool.Query(ctx, `SELECT s.ab_id, r.state, count(*) FROM bisection_steps s JOIN ab_runs a ON a.ab_id = s.ab_id
		JOIN runs r ON r.id = a.run_id WHERE s.bisection_id = $1 GROUP BY 1, 2`, id)
	if err != nil {
		return nil, fmt.Errorf("store: bisection runs: %w", err)
	}
	defer rows.Close()
	out := map[int64]map[string]int{}
	for rows.Next() {
		var ab int64
		var state string
		var n int
		if err := rows.Scan(&ab, &state, &n); err != nil {
			return nil, err
		}
		if out[ab] == nil {
			out[ab] = map[string]int{}
		}
		out[ab][state] = n
	}
	return out, rows.Err()
}
