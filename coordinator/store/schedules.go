package store

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ErrConflict is returned when a write would violate a uniqueness rule,
// such as a second schedule with an existing name.
var ErrConflict = errors.New("store: conflict with an existing row")

// Schedule is a cron-driven trigger of a suite (a nightly run).
type Schedule struct {
	ID       int64  `json:"id"`
	Name     string `json:"name"`
	Cron     string `json:"cron"`
	Timezone string `json:"timezone"`
	Suite    string `json:"suite"`
	// Build is the build id given to the runs; "{date}" in it is replaced
	// by the occurrence's UTC date (YYYYMMDD).
	Build  string `json:"build"`
	GitSHA string `json:"git_sha"`
	// Lineage is the build lineage of the triggered runs ("" is stored as
	// DefaultLineage), so a release branch's nightly forms its own series.
	Lineage        string          `json:"lineage"`
	DeviceSelector json.RawMessage `json:"device_selector"`
	ConfigOverride json.RawMessage `json:"config_override,omitempty"`
	Priority       int             `json:"priority"`
	Enabled        bool            `json:"enabled"`
	// Bisect is BisectAuto when a regression alert group raised by the
	// schedule's runs gets a bisection started automatically; "" is
	// stored as BisectOff.
	Bisect         string     `json:"bisect"`
	CatchupSeconds int        `json:"catchup_seconds"`
	NextFireAt     time.Time  `json:"next_fire_at"`
	LastFiredAt    *time.Time `json:"last_fired_at,omitempty"`
	CreatedAt      time.Time  `json:"created_at"`
	UpdatedAt      time.Time  `json:"updated_at"`
}

// ScheduleFiring records how one occurrence of a schedule was handled.
type ScheduleFiring struct {
	ScheduleID  int64     `json:"schedule_id"`
	Occurrence  time.Time `json:"occurrence"`
	HandledAt   time.Time `json:"handled_at"`
	Outcome     string    `json:"outcome" enum:"fired,skipped,failed"`
	Coordinator string    `json:"coordinator"`
	RunIDs      []string  `json:"run_ids"`
	Detail      string    `json:"detail"`
}

// Schedule bisect modes (Schedule.Bisect).
const (
	BisectOff  = "off"
	BisectAuto = "auto"
)

// Firing outcomes.
const (
	FiringFired   = "fired"
	FiringSkipped = "skipped"
	FiringFailed  = "failed"
)

const scheduleCols = `id, name, cron, timezone, suite, build, git_sha, device_selector, config_override,
	priority, enabled, catchup_seconds, next_fire_at, last_fired_at, created_at, updated_at, lineage, bisect`

func scanSchedule(row pgx.Row) (*Schedule, error) {
	var s Schedule
	var sel, over []byte
	err := row.Scan(&s.ID, &s.Name, &s.Cron, &s.Timezone, &s.Suite, &s.Build, &s.GitSHA, &sel, &over,
		&s.Priority, &s.Enabled, &s.CatchupSeconds, &s.NextFireAt, &s.LastFiredAt, &s.CreatedAt, &s.UpdatedAt, &s.Lineage, &s.Bisect)
	if err != nil {
		return nil, err
	}
	s.DeviceSelector = json.RawMessage(sel)
	if len(over) > 0 {
		s.ConfigOverride = json.RawMessage(over)
	}
	return &s, nil
}

func nullJSON(b json.RawMessage) any {
	if len(b) == 0 || string(b) == "null" {
		return nil
	}
	return []byte(b)
}

func selectorJSON(b json.RawMessage) []byte {
	if len(b) == 0 || string(b) == "null" {
		return []byte("{}")
	}
	return b
}

func isUniqueViolation(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505"
}

// CreateSchedule inserts sc (its ID and timestamps are ignored) and returns
// the stored row. The caller validates the cron expression and computes
// NextFireAt. It returns ErrConflict when the name is taken and an error
// wrapping ErrBadLineage for an invalid lineage.
func (s *Store) CreateSchedule(ctx context.Context, sc *Schedule) (*Schedule, error) {
	lineage, err := lineageOr(sc.Lineage)
	if err != nil {
		return nil, err
	}
	out, err := scanSchedule(s.pool.QueryRow(ctx, `
		INSERT INTO schedules (name, cron, timezone, suite, build, git_sha, device_selector, config_override,
			priority, enabled, catchup_seconds, next_fire_at, lineage, bisect)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
		RETURNING `+scheduleCols,
		sc.Name, sc.Cron, sc.Timezone, sc.Suite, sc.Build, sc.GitSHA, selectorJSON(sc.DeviceSelector), nullJSON(sc.ConfigOverride),
		sc.Priority, sc.Enabled, sc.CatchupSeconds, sc.NextFireAt, lineage, cmp.Or(sc.Bisect, BisectOff)))
	if isUniqueViolation(err) {
		return nil, ErrConflict
	}
	if err != nil {
		return nil, fmt.Errorf("store: create schedule: %w", err)
	}
	return out, nil
}

// UpdateSchedule replaces the definition of schedule sc.ID (an empty
// Lineage becomes DefaultLineage). It returns ErrNotFound for an unknown
// id, ErrConflict when the name is taken and an error wrapping
// ErrBadLineage for an invalid lineage.
func (s *Store) UpdateSchedule(ctx context.Context, sc *Schedule) (*Schedule, error) {
	lineage, err := lineageOr(sc.Lineage)
	if err != nil {
		return nil, err
	}
	out, err := scanSchedule(s.pool.QueryRow(ctx, `
		UPDATE schedules SET name = $2, cron = $3, timezone = $4, suite = $5, build = $6, git_sha = $7,
			device_selector = $8, config_override = $9, priority = $10, enabled = $11, catchup_seconds = $12,
			next_fire_at = $13, lineage = $14, bisect = $15, updated_at = now()
		WHERE id = $1
		RETURNING `+scheduleCols,
		sc.ID, sc.Name, sc.Cron, sc.Timezone, sc.Suite, sc.Build, sc.GitSHA, selectorJSON(sc.DeviceSelector), nullJSON(sc.ConfigOverride),
		sc.Priority, sc.Enabled, sc.CatchupSeconds, sc.NextFireAt, lineage, cmp.Or(sc.Bisect, BisectOff)))
	err = notFound(err)
	if errors.Is(err, ErrNotFound) {
		return nil, ErrNotFound
	}
	if isUniqueViolation(err) {
		return nil, ErrConflict
	}
	if err != nil {
		return nil, fmt.Errorf("store: update schedule: %w", err)
	}
	return out, nil
}

// GetSchedule returns the schedule with the given id, or ErrNotFound.
func (s *Store) GetSchedule(ctx context.Context, id int64) (*Schedule, error) {
	out, err := scanSchedule(s.pool.QueryRow(ctx, `SELECT `+scheduleCols+` FROM schedules WHERE id = $1`, id))
	err = notFound(err)
	if errors.Is(err, ErrNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("store: get schedule: %w", err)
	}
	return out, nil
}

// ListSchedules returns schedules with id > after, by id, at most limit.
func (s *Store) ListSchedules(ctx context.Context, after int64, limit int) ([]Schedule, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+scheduleCols+` FROM schedules WHERE id > $1 ORDER BY id LIMIT $2`, after, max(limit, 1))
	if err != nil {
		return nil, fmt.Errorf("store: list schedules: %w", err)
	}
	defer rows.Close()
	var out []Schedule
	for rows.Next() {
		sc, err := scanSchedule(rows)
		if err != nil {
			return nil, fmt.Errorf("store: list schedules: %w", err)
		}
		out = append(out, *sc)
	}
	return out, rows.Err()
}

// DeleteSchedule deletes a schedule and its firing history. It returns
// ErrNotFound for an unknown id.
func (s *Store) DeleteSchedule(ctx context.Context, id int64) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM schedules WHERE id = $1`, id)
	if err != nil {
		return fmt.Errorf("store: delete schedule: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	return nil
}

// ListScheduleFirings returns the most recent handled occurrences of a
// schedule, newest first.
func (s *Store) ListScheduleFirings(ctx context.Context, id int64, limit int) ([]ScheduleFiring, error) {
	rows, err := s.pool.Query(ctx, `SELECT schedule_id, occurrence, handled_at, outcome, coordinator, run_ids, detail
		FROM schedule_firings WHERE schedule_id = $1 ORDER BY occurrence DESC LIMIT $2`, id, max(limit, 1))
	if err != nil {
		return nil, fmt.Errorf("store: list firings: %w", err)
	}
	defer rows.Close()
	out := []ScheduleFiring{}
	for rows.Next() {
		var f ScheduleFiring
		if err := rows.Scan(&f.ScheduleID, &f.Occurrence, &f.HandledAt, &f.Outcome, &f.Coordinator, &f.RunIDs, &f.Detail); err != nil {
			return nil, fmt.Errorf("store: list firings: %w", err)
		}
		out = append(out, f)
	}
	return out, rows.Err()
}

// ScheduleOutcome is what a fire callback decided for a due schedule.
type ScheduleOutcome struct {
	// Firings are the occurrences handled (fired, skipped or failed).
	Firings []ScheduleFiring
	// Next is the new next_fire_at; it must be after the old one.
	Next time.Time
	// Fired is the occurrence that fired, if any (recorded as last_fired_at).
	Fired time.Time
}

// FireFunc handles one due schedule inside the claiming transaction. Runs
// it creates through tx commit together with the firing records, so an
// occurrence's runs exist if and only if its firing is recorded.
type FireFunc func(ctx context.Context, tx *Tx, sc *Schedule) (*ScheduleOutcome, error)

// HandleDueSchedule claims one enabled schedule whose next_fire_at is at or
// before now, skipping rows another coordinator holds (FOR UPDATE SKIP
// LOCKED), calls fire in the same transaction, records its firings
// (primary key (schedule, occurrence): a second record of an occurrence
// fails the whole transaction) and advances next_fire_at, then commits. It
// reports whether a schedule was handled; when fire fails nothing changes.
func (s *Store) HandleDueSchedule(ctx context.Context, now time.Time, coordinator string, fire FireFunc) (bool, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return false, fmt.Errorf("store: handle schedule: %w", err)
	}
	defer tx.Rollback(ctx)
	sc, err := scanSchedule(tx.QueryRow(ctx, `SELECT `+scheduleCols+` FROM schedules
		WHERE enabled AND next_fire_at <= $1 ORDER BY next_fire_at, id LIMIT 1 FOR UPDATE SKIP LOCKED`, now))
	err = notFound(err)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("store: handle schedule: %w", err)
	}
	out, err := fire(ctx, &Tx{s: s, tx: tx}, sc)
	if err != nil {
		return false, fmt.Errorf("store: handle schedule %d: %w", sc.ID, err)
	}
	if !out.Next.After(sc.NextFireAt) {
		return false, fmt.Errorf("store: handle schedule %d: next occurrence %v not after %v", sc.ID, out.Next, sc.NextFireAt)
	}
	for _, f := range out.Firings {
		runIDs := f.RunIDs
		if runIDs == nil {
			runIDs = []string{}
		}
		if _, err := tx.Exec(ctx, `INSERT INTO schedule_firings (schedule_id, occurrence, outcome, coordinator, run_ids, detail)
			VALUES ($1, $2, $3, $4, $5, $6)`, sc.ID, f.Occurrence, f.Outcome, coordinator, runIDs, f.Detail); err != nil {
			return false, fmt.Errorf("store: record firing of schedule %d at %v: %w", sc.ID, f.Occurrence, err)
		}
	}
	var lastFired any
	if !out.Fired.IsZero() {
		lastFired = out.Fired
	}
	tag, err := tx.Exec(ctx, `UPDATE schedules SET next_fire_at = $3, last_fired_at = COALESCE($4, last_fired_at)
		WHERE id = $1 AND next_fire_at = $2`, sc.ID, sc.NextFireAt, out.Next, lastFired)
	if err != nil {
		return false, fmt.Errorf("store: advance schedule %d: %w", sc.ID, err)
	}
	if tag.RowsAffected() != 1 {
		return false, fmt.Errorf("store: advance schedule %d: row changed under the lock", sc.ID)
	}
	if err := tx.Commit(ctx); err != nil {
		return false, fmt.Errorf("store: handle schedule %d: %w", sc.ID, err)
	}
	return true, nil
}
