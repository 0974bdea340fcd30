package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// EgressHosts returns the admin-set allow-list of hosts (host or
// host:port, lowercase) that a suite's model.url may name besides the
// coordinator's own artifact URL, sorted (issue 29, finding 8).
func (s *Store) EgressHosts(ctx context.Context) ([]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT host FROM egress_hosts ORDER BY host`)
	if err != nil {
		return nil, fmt.Errorf("store: egress hosts: %w", err)
	}
	defer rows.Close()
	out := []string{}
	for rows.Next() {
		var h string
		if err := rows.Scan(&h); err != nil {
			return nil, fmt.Errorf("store: egress hosts: %w", err)
		}
		out = append(out, h)
	}
	return out, rows.Err()
}

// SetEgressHosts replaces the allow-list with hosts (already normalised by
// the caller: lowercase host or host:port) in one transaction.
func (s *Store) SetEgressHosts(ctx context.Context, hosts []string) error {
	return s.tx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM egress_hosts WHERE NOT (host = ANY($1))`, hosts); err != nil {
			return fmt.Errorf("store: set egress hosts: %w", err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO egress_hosts (host) SELECT unnest($1::text[]) ON CONFLICT DO NOTHING`, hosts); err != nil {
			return fmt.Errorf("store: set egress hosts: %w", err)
		}
		return nil
	})
}
