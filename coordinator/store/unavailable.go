package store

import (
	"context"
	"errors"
	"net"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// Unavailable reports whether err means the database could not serve the
// request right now (down, unreachable, restarting, overloaded, or too slow
// for the caller's deadline) rather than that the request itself was wrong:
// a caller should answer "retry later" (HTTP 503, a temporary NATS auth
// refusal), not "not found" or "invalid". Domain errors (ErrNotFound,
// ErrStaleToken, ...) and constraint violations are not unavailability.
func Unavailable(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case strings.HasPrefix(pgErr.Code, "08"), // connection exception
			strings.HasPrefix(pgErr.Code, "53"),                                 // insufficient resources (too many connections)
			pgErr.Code == "57P01", pgErr.Code == "57P02", pgErr.Code == "57P03", // shutting down, crashed, starting up
			pgErr.Code == "57014",                        // query_canceled: statement_timeout
			pgErr.Code == "40001", pgErr.Code == "40P01": // serialization failure, deadlock: retry
			return true
		}
		return false
	}
	var connErr *pgconn.ConnectError
	if errors.As(err, &connErr) {
		return true
	}
	var netErr net.Error
	if errors.As(err, &netErr) {
		return true
	}
	if pgconn.Timeout(err) || pgconn.SafeToRetry(err) {
		return true
	}
	// pgx reports a connection lost mid-query (server killed, socket cut)
	// as a wrapped io error or "conn closed".
	msg := err.Error()
	return strings.Contains(msg, "conn closed") || strings.Contains(msg, "unexpected EOF") ||
		strings.Contains(msg, "connection reset") || strings.Contains(msg, "broken pipe") ||
		strings.Contains(msg, "closed pool")
}
