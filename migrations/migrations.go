// Package migrations holds the coordinator's Postgres schema as numbered
// goose SQL files (NNNNN_name.sql with "-- +goose Up" and "-- +goose Down"
// sections), embedded in the binary, and applies them under a Postgres
// session lock so several coordinators starting at once migrate exactly once.
//
// Files are numbered in the order they were written: 00001–00004 core
// (devices, runs, leases, results, samples), 00010 API (tokens, artifacts,
// schedules), 00020 regressions (alerts), then one number per change from
// 00021 on: 00021 lineage, 00022 device credentials, 00023 run
// notifications, 00024 artifact model facts, 00025 measured device
// profiles, 00026 credential expiry, 00027 deferred run notices, 00028
// expert load and device trace, 00029 devices' last assignment, 00030
// samples one row per telemetry message (sample_batches), 00031 builds,
// 00040 run provenance, 00050 device rejections, 00051 run telemetry
// counts, 00060 A/B comparisons, 00061 alert location ranges, 00062 token
// scopes and the egress allow-list, 00063 device sessions (one connection
// per device), 00064 bisections, 00065 devices' build since, 00066
// bisection webhooks, 00067 automatic bisection per schedule. Numbers are
// reserved per stream of work, so gaps are expected. Migrations written in parallel may merge out of order; they
// are applied when they appear (see New).
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

//go:embed *.sql
var files embed.FS

// FS returns the embedded migration files.
func FS() fs.FS { return files }

// Status is the state of one migration.
type Status struct {
	Version int64
	Name    string
	Applied bool
}

// Migrator applies the embedded migrations to one database. Close it when done.
type Migrator struct {
	db       *sql.DB
	provider *goose.Provider
}

// New opens databaseURL and prepares the migrations. It does not change the
// database.
func New(databaseURL string) (*Migrator, error) {
	db, err := sql.Open("pgx", databaseURL)
	if err != nil {
		return nil, fmt.Errorf("migrations: open database: %w", err)
	}
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("migrations: %w", err)
	}
	// Out of order: a migration merged after a higher-numbered one (work
	// developed in parallel) is applied when it appears, instead of
	// blocking every later start.
	p, err := goose.NewProvider(goose.DialectPostgres, db, files, goose.WithSessionLocker(locker), goose.WithAllowOutofOrder(true))
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("migrations: %w", err)
	}
	return &Migrator{db: db, provider: p}, nil
}

// Close releases the database connection.
func (m *Migrator) Close() error { return m.db.Close() }

// Up applies every pending migration and returns how many it applied. It
// applies nothing, and returns a *SchemaAheadError, when the database is
// newer than this binary (versions.go).
func (m *Migrator) Up(ctx context.Context) (int, error) {
	if err := m.CheckNotAhead(ctx); err != nil {
		return 0, err
	}
	res, err := m.provider.Up(ctx)
	if err != nil {
		return len(res), fmt.Errorf("migrations: up: %w", err)
	}
	return len(res), nil
}

// Down rolls back the most recent migration. It returns false when no
// migration was applied.
func (m *Migrator) Down(ctx context.Context) (bool, error) {
	_, err := m.provider.Down(ctx)
	if errors.Is(err, goose.ErrNoNextVersion) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("migrations: down: %w", err)
	}
	return true, nil
}

// Status lists every known migration and whether it is applied.
func (m *Migrator) Status(ctx context.Context) ([]Status, error) {
	st, err := m.provider.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrations: status: %w", err)
	}
	out := make([]Status, 0, len(st))
	for _, s := range st {
		out = append(out, Status{Version: s.Source.Version, Name: s.Source.Path, Applied: s.State == goose.StateApplied})
	}
	return out, nil
}

// Up applies all pending migrations to databaseURL; see Migrator.Up. serve
// calls it at startup, so it refuses a database newer than the binary.
func Up(ctx context.Context, databaseURL string) error {
	m, err := New(databaseURL)
	if err != nil {
		return err
	}
	defer m.Close()
	_, err = m.Up(ctx)
	return err
}
