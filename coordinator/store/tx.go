package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Tx is a unit of work inside a transaction the store opened, handed to a
// callback (HandleDueSchedule's FireFunc). Its writes commit or roll back
// with that transaction, so callers compose atomic writes without opening
// transactions or speaking SQL themselves. A Tx is valid only during the
// callback it was passed to and is not safe for concurrent use.
type Tx struct {
	s  *Store
	tx pgx.Tx
}

// CreateRuns is Store.CreateRuns inside t: the job snapshot, the trigger and
// its runs commit or roll back with t.
func (t *Tx) CreateRuns(ctx context.Context, p *CreateRunsParams) (*Trigger, []Run, error) {
	return t.s.createRunsTx(ctx, t.tx, p)
}

// Savepoint runs fn inside a savepoint of t. When fn returns nil its writes
// stay part of t; when fn fails they are rolled back to the savepoint while
// t itself goes on, and fn's error is returned as fnErr. err reports a
// failure of the savepoint itself, after which t is unusable.
func (t *Tx) Savepoint(ctx context.Context, fn func(*Tx) error) (fnErr, err error) {
	sp, err := t.tx.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("store: savepoint: %w", err)
	}
	if fnErr = fn(&Tx{s: t.s, tx: sp}); fnErr != nil {
		if err := sp.Rollback(ctx); err != nil {
			return fnErr, fmt.Errorf("store: roll back to savepoint: %w", err)
		}
		return fnErr, nil
	}
	if err := sp.Commit(ctx); err != nil {
		return nil, fmt.Errorf("store: release savepoint: %w", err)
	}
	return nil, nil
}

// Raw returns the underlying pgx transaction, for tests that write their
// own rows in the same transaction (like Pool). Production code outside
// store must not use it.
func (t *Tx) Raw() pgx.Tx { return t.tx }
