package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lesfarm/lesfarm/jobs"
	"github.com/lesfarm/lesfarm/protocol"
)

// Run states.
const (
	RunQueued      = "queued"
	RunAssigned    = "assigned"
	RunRunning     = "running"
	RunSucceeded   = "succeeded"
	RunFailed      = "failed"
	RunCancelled   = "cancelled"
	RunInfraFailed = "infra_failed"
	// RunBuildFailed: the build's own code failed (protocol.OutcomeBuildFailed);
	// never retried as infrastructure.
	RunBuildFailed = "build_failed"
)

// RunStates lists every run state.
var RunStates = []string{RunQueued, RunAssigned, RunRunning, RunSucceeded, RunFailed, RunCancelled, RunInfraFailed, RunBuildFailed}

// TerminalState reports whether a run in state st will not change again.
func TerminalState(st string) bool {
	switch st {
	case RunSucceeded, RunFailed, RunCancelled, RunInfraFailed, RunBuildFailed:
		return true
	}
	return false
}

// ErrNoDevices is returned by CreateRuns with Fanout when no device matches.
var ErrNoDevices = errors.New("store: no device matches the selector")

// ErrBusy is returned by ClaimRun when the device is locked by another
// coordinator, already holds a run, is drained or is not online.
var ErrBusy = errors.New("store: device busy or unavailable")

// ErrNothingToClaim is returned by ClaimRun when every candidate was taken.
var ErrNothingToClaim = errors.New("store: no candidate run could be claimed")

// ErrUnfit is returned (it also matches ErrNothingToClaim) by ClaimRun
// when the device refused every candidate as unfit within UnfitFor: the
// runs are not taken, only not for this device.
var ErrUnfit = fmt.Errorf("%w: the device refused it as unfit", ErrNothingToClaim)

// DefaultLineage is the build lineage of triggers, runs and schedules that
// do not name one, and of every row stored before lineages existed.
const DefaultLineage = "main"

// MaxLineageLen is the longest lineage accepted, in bytes (the API's bound
// for build ids).
const MaxLineageLen = 200

// LineagePattern is the charset of a lineage: letters, digits, '.', '_'
// and '-', starting with a letter or digit. '/' is excluded because it
// separates the fields of a series key's text form, so "release/3" is
// written "release-3". The migration checks the same rule.
const LineagePattern = `^[A-Za-z0-9][A-Za-z0-9._-]*$`

var lineageRE = regexp.MustCompile(LineagePattern)

// ErrBadLineage is returned (wrapped, naming the value) for a lineage that
// breaks LineagePattern or MaxLineageLen.
var ErrBadLineage = errors.New("store: invalid lineage")

// ValidateLineage checks a non-empty lineage against LineagePattern and
// MaxLineageLen; "" is valid and means DefaultLineage. The error wraps
// ErrBadLineage and says what is wrong in one line.
func ValidateLineage(l string) error {
	switch {
	case l == "":
		return nil
	case len(l) > MaxLineageLen:
		return fmt.Errorf("%w: %d bytes, at most %d allowed", ErrBadLineage, len(l), MaxLineageLen)
	case !lineageRE.MatchString(l):
		return fmt.Errorf("%w %q: use letters, digits, '.', '_' and '-', starting with a letter or digit (e.g. release-3)", ErrBadLineage, l)
	}
	return nil
}

// lineageOr validates l and returns it, or DefaultLineage when it is empty.
func lineageOr(l string) (string, error) {
	if err := ValidateLineage(l); err != nil {
		return "", err
	}
	if l == "" {
		return DefaultLineage, nil
	}
	return l, nil
}

// Job is an immutable spec snapshot.
type Job struct {
	ID          int64     `json:"id"`
	Name        string    `json:"name"`
	Suite       string    `json:"suite"`
	Spec        jobs.Spec `json:"spec"`
	Fingerprint string    `json:"fingerprint"`
	CreatedAt   time.Time `json:"created_at"`
}

// PutJob stores a validated spec snapshot, or returns the existing one with
// the same fingerprint.
func (s *Store) PutJob(ctx context.Context, spec *jobs.Spec) (*Job, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	js, err := spec.MarshalCanonical()
	if err != nil {
		return nil, err
	}
	fp := spec.Fingerprint()
	var j Job
	var raw []byte
	err = s.pool.QueryRow(ctx, `
		WITH ins AS (
			INSERT INTO jobs (name, suite, spec, fingerprint) VALUES ($1, $2, $3, $4)
			ON CONFLICT (fingerprint) DO NOTHING
			RETURNING id, name, suite, spec, fingerprint, created_at)
		SELECT * FROM ins
		UNION ALL
		SELECT id, name, suite, spec, fingerprint, created_at FROM jobs WHERE fingerprint = $4
		LIMIT 1`, spec.Name, spec.SuiteName(), js, fp).Scan(&j.ID, &j.Name, &j.Suite, &raw, &j.Fingerprint, &j.CreatedAt)
	err = notFound(err)
	if errors.Is(err, ErrNotFound) {
		// See putJobID: a concurrent insert committed after this statement's
		// snapshot; a new statement sees it.
		err = s.pool.QueryRow(ctx, `SELECT id, name, suite, spec, fingerprint, created_at FROM jobs WHERE fingerprint = $1`, fp).
			Scan(&j.ID, &j.Name, &j.Suite, &raw, &j.Fingerprint, &j.CreatedAt)
	}
	if err != nil {
		return nil, fmt.Errorf("store: put job: %w", err)
	}
	if err := json.Unmarshal(raw, &j.Spec); err != nil {
		return nil, fmt.Errorf("store: job %d spec: %w", j.ID, err)
	}
	return &j, nil
}

// putJobID stores the job snapshot (spec js with fingerprint fp) inside tx, or
// finds the stored one, and returns its id. When another transaction
// inserts the same snapshot concurrently, the INSERT waits for it and does
// nothing, and the SELECT of the same statement cannot see the row its
// snapshot predates, so the statement returns no row; a second statement
// (read committed: a new snapshot) finds it. Without that retry, two
// schedules of one suite firing together failed one of their occurrences.
func putJobID(ctx context.Context, tx pgx.Tx, spec *jobs.Spec, js []byte, fp string) (int64, error) {
	var id int64
	err := tx.QueryRow(ctx, `
		WITH ins AS (
			INSERT INTO jobs (name, suite, spec, fingerprint) VALUES ($1, $2, $3, $4)
			ON CONFLICT (fingerprint) DO NOTHING RETURNING id)
		SELECT id FROM ins UNION ALL SELECT id FROM jobs WHERE fingerprint = $4 LIMIT 1`,
		spec.Name, spec.SuiteName(), js, fp).Scan(&id)
	err = notFound(err)
	if errors.Is(err, ErrNotFound) {
		err = tx.QueryRow(ctx, `SELECT id FROM jobs WHERE fingerprint = $1`, fp).Scan(&id)
	}
	if err != nil {
		return 0, fmt.Errorf("store: put job: %w", err)
	}
	return id, nil
}

// GetJob returns a job, or ErrNotFound. Jobs are immutable and cached.
func (s *Store) GetJob(ctx context.Context, id int64) (*Job, error) {
	if v, ok := s.jobCache.Load(id); ok {
		j := *v.(*Job)
		return &j, nil
	}
	var j Job
	var raw []byte
	err := s.pool.QueryRow(ctx, `SELECT id, name, suite, spec, fingerprint, created_at FROM jobs WHERE id = $1`, id).
		Scan(&j.ID, &j.Name, &j.Suite, &raw, &j.Fingerprint, &j.CreatedAt)
	if err != nil {
		return nil, notFound(err)
	}
	if err := json.Unmarshal(raw, &j.Spec); err != nil {
		return nil, fmt.Errorf("store: job %d spec: %w", j.ID, err)
	}
	if s.jobCount.Add(1) > 4096 {
		s.jobCache.Clear()
		s.jobCount.Store(0)
	}
	cp := j
	s.jobCache.Store(id, &cp)
	return &j, nil
}

// Run is one run: a job on one device for one build.
type Run struct {
	ID        int64  `json:"id"`
	TriggerID int64  `json:"trigger_id,omitempty"`
	JobID     int64  `json:"job_id"`
	Suite     string `json:"suite"`
	Build     string `json:"build"`
	GitSHA    string `json:"git_sha"`
	// Lineage is the build lineage (the branch the build belongs to, e.g.
	// "main" or "release-3"); the regression monitor keeps one series per
	// lineage. Runs created before lineages existed are "main".
	Lineage string `json:"lineage"`
	// Selector is the device selector the run was placed with.
	Selector jobs.Selector `json:"device_selector"`
	// TargetDeviceID pins the run to one device (fanout triggers).
	TargetDeviceID string `json:"target_device_id,omitempty"`
	// DeviceID is the device of the current or last attempt.
	DeviceID        string        `json:"device_id,omitempty"`
	State           string        `json:"state"`
	Priority        int           `json:"priority"`
	Attempts        int           `json:"attempts"`
	MaxAttempts     int           `json:"max_attempts"`
	RetryOnFailure  bool          `json:"retry_on_failure"`
	Timeout         time.Duration `json:"timeout"`
	Token           int64         `json:"token,omitempty"`
	LeaseExpiresAt  *time.Time    `json:"lease_expires_at,omitempty"`
	DeadlineAt      *time.Time    `json:"deadline_at,omitempty"`
	Progress        float64       `json:"progress"`
	ProgressMessage string        `json:"progress_message,omitempty"`
	Error           string        `json:"error,omitempty"`
	CancelReason    string        `json:"cancel_reason,omitempty"`
	CreatedAt       time.Time     `json:"created_at"`
	QueuedAt        time.Time     `json:"queued_at"`
	AssignedAt      *time.Time    `json:"assigned_at,omitempty"`
	StartedAt       *time.Time    `json:"started_at,omitempty"`
	FinishedAt      *time.Time    `json:"finished_at,omitempty"`
	UpdatedAt       time.Time     `json:"updated_at"`
	// Provenance is which code produced the last attempt's result, as its
	// agent reported it (nil before a result, or from an older agent).
	Provenance *protocol.Provenance `json:"provenance,omitempty"`
	// WaitingReason says why a queued run waits; not stored, filled at
	// read time by FillWaitingReasons (waiting.go).
	WaitingReason string `json:"waiting_reason,omitempty"`
}

const runCols = `r.id, coalesce(r.trigger_id, 0), r.job_id, r.suite, r.build, r.git_sha, r.device_selector,
	coalesce(r.target_device_id, ''), coalesce(r.device_id, ''), r.state, r.priority, r.attempts, r.max_attempts,
	r.retry_on_failure, r.timeout_ms, coalesce(r.token, 0), r.lease_expires_at, r.deadline_at, r.progress,
	r.progress_message, r.error, r.cancel_reason, r.created_at, r.queued_at, r.assigned_at, r.started_at,
	r.finished_at, r.updated_at, r.lineage, r.provenance`

func scanRun(row pgx.Row) (*Run, error) {
	var r Run
	var sel []byte
	var timeoutMS int64
	var progress float32
	var prov []byte
	err := row.Scan(&r.ID, &r.TriggerID, &r.JobID, &r.Suite, &r.Build, &r.GitSHA, &sel, &r.TargetDeviceID, &r.DeviceID,
		&r.State, &r.Priority, &r.Attempts, &r.MaxAttempts, &r.RetryOnFailure, &timeoutMS, &r.Token, &r.LeaseExpiresAt,
		&r.DeadlineAt, &progress, &r.ProgressMessage, &r.Error, &r.CancelReason, &r.CreatedAt, &r.QueuedAt,
		&r.AssignedAt, &r.StartedAt, &r.FinishedAt, &r.UpdatedAt, &r.Lineage, &prov)
	if err != nil {
		return nil, notFound(err)
	}
	if len(prov) > 0 {
		r.Provenance = new(protocol.Provenance)
		if json.Unmarshal(prov, r.Provenance) != nil {
			r.Provenance = nil
		}
	}
	_ = json.Unmarshal(sel, &r.Selector)
	r.Timeout = time.Duration(timeoutMS) * time.Millisecond
	r.Progress = float64(progress)
	return &r, nil
}

func collectRuns(rows pgx.Rows, err error) ([]Run, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Run
	for rows.Next() {
		r, err := scanRun(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, *r)
	}
	return out, rows.Err()
}

// CreateRunsParams are the arguments of CreateRuns.
type CreateRunsParams struct {
	// Spec is the job spec with any override already applied (see
	// jobs.Spec.Apply); it is validated again here.
	Spec   *jobs.Spec
	Build  string
	GitSHA string
	// Lineage is the build lineage given to the trigger and its runs
	// (default DefaultLineage); see ValidateLineage.
	Lineage string
	// Selector replaces Spec.Devices when set.
	Selector *jobs.Selector
	// Fanout creates one run per matching online, undrained device, pinned
	// to it; otherwise one run goes to the first matching device.
	Fanout bool
	// Source says who triggered: "api", "cli", "schedule:<id>", ...
	Source string
}

// Trigger is one request that created runs.
type Trigger struct {
	ID        int64         `json:"id"`
	Suite     string        `json:"suite"`
	JobID     int64         `json:"job_id"`
	Build     string        `json:"build"`
	GitSHA    string        `json:"git_sha"`
	Lineage   string        `json:"lineage"`
	Selector  jobs.Selector `json:"device_selector"`
	Fanout    bool          `json:"fanout"`
	Source    string        `json:"source"`
	CreatedAt time.Time     `json:"created_at"`
	RunIDs    []int64       `json:"run_ids"`
}

// CreateRuns stores the job snapshot, a trigger and its queued runs in one
// transaction (see Tx.CreateRuns); a trigger without fanout is one
// statement (createRunOne). With Fanout and no matching device it
// returns ErrNoDevices; an invalid Lineage gives an error wrapping
// ErrBadLineage.
func (s *Store) CreateRuns(ctx context.Context, p *CreateRunsParams) (*Trigger, []Run, error) {
	if !p.Fanout {
		tr, runs, ok, err := s.createRunOne(ctx, p)
		if err != nil {
			return nil, nil, err
		}
		if ok {
			s.notifyRuns(ctx, runs)
			return tr, runs, nil
		}
	}
	var (
		tr   *Trigger
		runs []Run
	)
	err := s.tx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, deferNotifySQL); err != nil {
			return err
		}
		var err error
		tr, runs, err = s.createRunsTx(ctx, tx, p)
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	s.notifyRuns(ctx, runs)
	return tr, runs, nil
}

// selectorSQL is the SQL form of fit.Match over devices d for the
// given placeholders (platform, model, min_ram, emulated, labels); a NULL
// platform/model/emulated matches any device.
func selectorSQL(platform, model, minRAM, emulated, labels string) string {
	return fmt.Sprintf(`(%[1]s::text IS NULL OR d.platform = %[1]s::text)
		AND (%[2]s::text IS NULL OR lower(d.device_model) = lower(%[2]s::text))
		AND (%[3]s::bigint = 0 OR coalesce(d.ram_bytes, 0) >= %[3]s::bigint)
		AND (%[4]s::boolean IS NULL OR d.emulated = %[4]s::boolean)
		AND (d.agent_labels || d.labels) @> %[5]s::jsonb`, platform, model, minRAM, emulated, labels)
}

func nullIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// GetTrigger returns a trigger with its run ids.
func (s *Store) GetTrigger(ctx context.Context, id int64) (*Trigger, error) {
	var t Trigger
	var sel []byte
	err := s.pool.QueryRow(ctx, `SELECT t.id, t.suite, t.job_id, t.build, t.git_sha, t.lineage, t.device_selector, t.fanout, t.source, t.created_at,
		coalesce((SELECT array_agg(id ORDER BY id) FROM runs WHERE trigger_id = t.id), '{}')
		FROM triggers t WHERE t.id = $1`, id).Scan(&t.ID, &t.Suite, &t.JobID, &t.Build, &t.GitSHA, &t.Lineage, &sel, &t.Fanout, &t.Source, &t.CreatedAt, &t.RunIDs)
	if err != nil {
		return nil, notFound(err)
	}
	_ = json.Unmarshal(sel, &t.Selector)
	return &t, nil
}

// GetRun returns one run, or ErrNotFound.
func (s *Store) GetRun(ctx context.Context, id int64) (*Run, error) {
	return scanRun(s.pool.QueryRow(ctx, `SELECT `+runCols+` FROM runs r WHERE r.id = $1`, id))
}

// ListRunsParams filter ListRuns. Zero fields do not filter.
type ListRunsParams struct {
	Suite     string
	States    []string
	Build     string
	Lineage   string
	DeviceID  string
	TriggerID int64
	// Before is the id of the last run of the previous page: runs are listed
	// newest first and the next page has ids below it.
	Before int64
	// Limit defaults to 50 and is capped at 1000.
	Limit int
}

// ListRuns lists runs, newest first.
func (s *Store) ListRuns(ctx context.Context, p *ListRunsParams) ([]Run, error) {
	var where []string
	var args []any
	add := func(cond string, v any) {
		args = append(args, v)
		where = append(where, fmt.Sprintf(cond, len(args)))
	}
	if p.Suite != "" {
		add("r.suite = $%d", p.Suite)
	}
	if len(p.States) > 0 {
		add("r.state = ANY($%d)", p.States)
	}
	if p.Build != "" {
		add("r.build = $%d", p.Build)
	}
	if p.Lineage != "" {
		add("r.lineage = $%d", p.Lineage)
	}
	if p.DeviceID != "" {
		add("r.device_id = $%d", p.DeviceID)
	}
	if p.TriggerID != 0 {
		add("r.trigger_id = $%d", p.TriggerID)
	}
	if p.Before != 0 {
		add("r.id < $%d", p.Before)
	}
	limit := p.Limit
	if limit <= 0 {
		limit = 50
	}
	limit = min(limit, 1000)
	q := `SELECT ` + runCols + ` FROM runs r`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += fmt.Sprintf(" ORDER BY r.id DESC LIMIT %d", limit)
	runs, err := collectRuns(s.pool.Query(ctx, q, args...))
	if err != nil {
		return nil, fmt.Errorf("store: list runs: %w", err)
	}
	return runs, nil
}

// CountRunsByState returns how many runs are in each state (queue depth and
// active leases for metrics).
func (s *Store) CountRunsByState(ctx context.Context) (map[string]int64, error) {
	rows, err := s.pool.Query(ctx, `SELECT state, count(*) FROM runs WHERE state IN ('queued', 'assigned', 'running') GROUP BY state`)
	if err != nil {
		return nil, fmt.Errorf("store: count runs: %w", err)
	}
	defer rows.Close()
	out := map[string]int64{RunQueued: 0, RunAssigned: 0, RunRunning: 0}
	for rows.Next() {
		var st string
		var n int64
		if err := rows.Scan(&st, &n); err != nil {
			return nil, err
		}
		out[st] = n
	}
	return out, rows.Err()
}

// CancelRun cancels a queued or active run and returns it as it was before
// the cancel (its DeviceID and Token say which agent to notify; Token is 0
// for a run that was still queued). A finished run gives ErrConflict.
func (s *Store) CancelRun(ctx context.Context, id int64, reason string) (*Run, error) {
	var before *Run
	err := s.tx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, deferNotifySQL); err != nil {
			return err
		}
		r, err := scanRun(tx.QueryRow(ctx, `SELECT `+runCols+` FROM runs r WHERE r.id = $1 FOR UPDATE`, id))
		if err != nil {
			return err
		}
		if TerminalState(r.State) {
			return ErrConflict
		}
		before = r
		if _, err := tx.Exec(ctx, `UPDATE runs SET state = 'cancelled', cancel_reason = $2, finished_at = now(), updated_at = now(),
			lease_expires_at = NULL WHERE id = $1`, id, clipText(reason)); err != nil {
			return err
		}
		if r.Token != 0 && r.State != RunQueued {
			_, err = tx.Exec(ctx, `UPDATE leases SET released_at = now(), outcome = 'cancelled' WHERE token = $1 AND released_at IS NULL`, r.Token)
		}
		return err
	})
	if err != nil {
		if errors.Is(err, ErrNotFound) || errors.Is(err, ErrConflict) {
			return nil, err
		}
		return nil, fmt.Errorf("store: cancel run: %w", err)
	}
	s.notifyRuns(ctx, []Run{{ID: before.ID, State: RunCancelled, TriggerID: before.TriggerID}})
	if before.State == RunQueued {
		before.Token = 0
	}
	return before, nil
}

func clipText(s string) string {
	if len(s) > 2000 {
		return s[:2000]
	}
	return s
}

// failLeases ends the leases of the active runs selected by where (over
// runs, with args) as infrastructure failures: each run is requeued while
// attempts remain (its partial samples and results are deleted, since the
// next attempt reports afresh) and becomes infra_failed otherwise.
func failLeases(ctx context.Context, tx pgx.Tx, where string, args []any, reason, outcome string) ([]LostRun, error) {
	rows, err := tx.Query(ctx, `SELECT id, token, device_id, attempts < max_attempts, coalesce(trigger_id, 0) FROM runs WHERE `+where+` FOR UPDATE SKIP LOCKED`, args...)
	if err != nil {
		return nil, err
	}
	var lost []LostRun
	for rows.Next() {
		var l LostRun
		if err := rows.Scan(&l.RunID, &l.Token, &l.DeviceID, &l.Requeued, &l.TriggerID); err != nil {
			rows.Close()
			return nil, err
		}
		lost = append(lost, l)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for _, l := range lost {
		if err := endLease(ctx, tx, l.RunID, l.Token, l.Requeued, RunInfraFailed, reason, outcome); err != nil {
			return nil, err
		}
	}
	return lost, nil
}

// endLease releases the lease (token) of run id and either requeues the run
// or moves it to the final state.
func endLease(ctx context.Context, tx pgx.Tx, id, token int64, requeue bool, final, reason, outcome string) error {
	if requeue {
		// Clearing the token fences the lost attempt off at once: its late
		// telemetry and result no longer match while the run waits in the
		// queue (the samples deleted below would otherwise come back).
		if _, err := tx.Exec(ctx, `UPDATE runs SET state = 'queued', queued_at = now(), updated_at = now(), lease_expires_at = NULL,
			deadline_at = NULL, token = NULL, progress = 0, progress_message = '', error = $2 WHERE id = $1`, id, clipText(reason)); err != nil {
			return err
		}
		for _, del := range []string{`DELETE FROM sample_batches WHERE run_id = $1`, `DELETE FROM expert_load WHERE run_id = $1`,
			`DELETE FROM run_device_states WHERE run_id = $1`} {
			if _, err := tx.Exec(ctx, del, id); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, `DELETE FROM results WHERE run_id = $1`, id); err != nil {
			return err
		}
	} else {
		if _, err := tx.Exec(ctx, `UPDATE runs SET state = $2, finished_at = now(), updated_at = now(), lease_expires_at = NULL,
			error = $3 WHERE id = $1`, id, final, clipText(reason)); err != nil {
			return err
		}
	}
	_, err := tx.Exec(ctx, `UPDATE leases SET released_at = now(), outcome = $2 WHERE token = $1 AND released_at IS NULL`, token, outcome)
	return err
}
