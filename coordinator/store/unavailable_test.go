package store_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/internal/testenv"
)

// TestStatementTimeout: a statement running past Config.StatementTimeout
// is ended by the server, and the error counts as unavailability (503,
// retry), not as a bad request.
func TestStatementTimeout(t *testing.T) {
	t.Parallel()
	st, err := store.Open(context.Background(), testenv.PostgresURL(t), store.Config{StatementTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	start := time.Now()
	_, err = st.Pool().Exec(context.Background(), `SELECT pg_sleep(5)`)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "57014" || time.Since(start) > 3*time.Second {
		t.Fatalf("pg_sleep(5) under a 200ms statement_timeout: %v after %v", err, time.Since(start))
	}
	if !store.Unavailable(err) {
		t.Fatalf("Unavailable(%v) = false", err)
	}
}

func TestUnavailable(t *testing.T) {
	tests := []struct {
		err  error
		want bool
	}{
		{nil, false},
		{store.ErrNotFound, false},
		{store.ErrStaleToken, false},
		{&pgconn.PgError{Code: "23505"}, false}, // unique violation
		{&pgconn.PgError{Code: "22021"}, false}, // bad byte sequence (NUL)
		{&pgconn.PgError{Code: "57P01"}, true},  // admin shutdown
		{&pgconn.PgError{Code: "08006"}, true},  // connection failure
		{&pgconn.PgError{Code: "53300"}, true},  // too many connections
		{fmt.Errorf("store: x: %w", context.DeadlineExceeded), true},
		{&pgconn.ConnectError{}, true},
		{errors.New("closed pool"), true},
	}
	for _, tc := range tests {
		if got := store.Unavailable(tc.err); got != tc.want {
			t.Errorf("Unavailable(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
