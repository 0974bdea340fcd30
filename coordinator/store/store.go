// Package store is the coordinator's only SQL speaker: every query against
// Postgres lives here, behind methods that take a context and, for more than
// two arguments, a params struct. Domain errors (ErrNotFound, ErrConflict,
// ErrStaleToken) are mapped at this boundary: notFound is the one place that
// turns pgx.ErrNoRows into ErrNotFound, and callers never see pgx errors.
//
// Transactions stay inside this package. A caller that must compose writes
// atomically with the store's own (the nightly scheduler creating runs in
// the transaction that claims a schedule) is handed a *Tx by the method
// that opened the transaction, and uses its methods and Tx.Savepoint; it
// never begins, commits or rolls back anything itself.
//
// Core tables (devices, jobs, runs, leases, results, samples) are in this
// package's core files; other areas add their own files (tokens.go,
// schedules.go, alerts.go, ...). A Store is safe for concurrent use.
//
// # Hand-written SQL, not sqlc
//
// The queries are written by hand with pgx and scanned into the package's
// types (about 70 Scan calls). sqlc, which generates that code from the SQL,
// was weighed and not adopted, for two reasons:
//
//   - Several queries are built at run time and sqlc only checks static
//     ones: the device selector filter (selectorSQL, shared by scheduling,
//     fan-out and the unfit checks), optional list filters, and the
//     telemetry ingest, which COPYs into a staging table and deduplicates.
//     These are the queries most worth checking and sqlc would not see them.
//   - sqlc's PostgreSQL engine links libpg_query through cgo. It is not a
//     Go module binary this project can fetch ready-made; `go run` from the
//     module proxy compiles it, C library included, on every CI machine, a
//     large share of the 15-minute CI budget, to regenerate code whose
//     correctness the tests against a real Postgres already establish.
//
// What sqlc would give, compile-time checked columns, comes here from the
// tests: every method runs against a real Postgres with the migrations
// applied (store tests, the API and coordinator tests), so a renamed column
// or a mistyped scan fails `make test`.
package store

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrNotFound is returned when the requested row does not exist.
var ErrNotFound = errors.New("store: not found")

// ErrStaleToken is returned when a write carries a fencing token that is not
// the current lease's token (a late report from a lost or superseded agent),
// or when the run is no longer in a state that accepts the write.
var ErrStaleToken = errors.New("store: stale fencing token")

// Store wraps a pgx connection pool. The zero value is not usable; build one
// with Open or New.
type Store struct {
	pool *pgxpool.Pool
	// jobCache holds job snapshots by id; jobs are immutable, so entries
	// never go stale.
	jobCache sync.Map
	jobCount atomic.Int64
	// noFastCopy forces InsertTelemetry's deduplicating path (tests).
	noFastCopy atomic.Bool
	// telemetryHeld, when set, is called inside InsertTelemetry's
	// transaction right after the token check (tests hold it open there).
	telemetryHeld func()
	// notifying bounds the notices sent in the background (notifyRunsLater).
	notifying chan struct{}
}

// SetDedupOnly makes InsertTelemetry always take the staging-table path
// (for tests and benchmarks that compare the two paths).
func (s *Store) SetDedupOnly(v bool) { s.noFastCopy.Store(v) }

// Config tunes Open.
type Config struct {
	// MaxConns bounds the pool; 0 means pgxpool's default (max(4, NumCPU)).
	MaxConns int32
	// ConnectTimeout bounds the first ping; 0 means 10s.
	ConnectTimeout time.Duration
	// StatementTimeout is the server-side statement_timeout of every
	// connection (and idle_in_transaction_session_timeout, twice it), so a
	// statement stuck behind a lock or on a slow disk ends with an error
	// instead of holding a connection; 0 means DefaultStatementTimeout,
	// negative means none. Callers still bound their own waits with
	// context deadlines: a frozen server enforces nothing.
	StatementTimeout time.Duration
}

// DefaultStatementTimeout is Config.StatementTimeout's default.
const DefaultStatementTimeout = 30 * time.Second

// Open connects to databaseURL and checks the connection with a ping.
func Open(ctx context.Context, databaseURL string, cfg Config) (*Store, error) {
	pc, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return nil, fmt.Errorf("store: parse database url: %w", err)
	}
	if cfg.MaxConns > 0 {
		pc.MaxConns = cfg.MaxConns
	}
	if st := cmp.Or(cfg.StatementTimeout, DefaultStatementTimeout); st > 0 {
		if pc.ConnConfig.RuntimeParams == nil {
			pc.ConnConfig.RuntimeParams = map[string]string{}
		}
		// A URL's own options win.
		if _, ok := pc.ConnConfig.RuntimeParams["statement_timeout"]; !ok {
			pc.ConnConfig.RuntimeParams["statement_timeout"] = strconv.FormatInt(st.Milliseconds(), 10)
		}
		if _, ok := pc.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"]; !ok {
			pc.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"] = strconv.FormatInt(2*st.Milliseconds(), 10)
		}
	}
	timeout := cfg.ConnectTimeout
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("store: connect: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("store: ping database: %w", err)
	}
	return New(pool), nil
}

// New wraps an existing pool. Close closes it.
func New(pool *pgxpool.Pool) *Store { return &Store{pool: pool, notifying: make(chan struct{}, 4)} }

// Pool returns the underlying pool, for packages (tests, benchmarks) that
// need raw access. Production code outside store must not write SQL.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Close closes the pool, waiting for connections in use to be returned.
func (s *Store) Close() { s.pool.Close() }

// Ping checks that the database answers (readiness).
func (s *Store) Ping(ctx context.Context) error { return s.pool.Ping(ctx) }

// notFound maps pgx.ErrNoRows to ErrNotFound; every other error is returned
// unchanged. It is the one place that knows about pgx.ErrNoRows.
func notFound(err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrNotFound
	}
	return err
}

// tx runs fn in a transaction, committing when it returns nil.
func (s *Store) tx(ctx context.Context, fn func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, s.pool, fn)
}

func jsonUnmarshal(b []byte, v any) error {
	if len(b) == 0 {
		return nil
	}
	return json.Unmarshal(b, v)
}
