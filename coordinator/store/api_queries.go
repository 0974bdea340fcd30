package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// AlertGroupsForBuild returns the alert groups recorded at build (and
// suite, when not empty), newest first, with id below beforeID when it is
// not zero. CI uses it to learn whether its build regressed.
func (s *Store) AlertGroupsForBuild(ctx context.Context, suite, build string, beforeID int64, limit int) ([]AlertGroup, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+groupColumns+` FROM alert_groups g
		WHERE g.build = $1 AND ($2 = '' OR g.suite = $2) AND ($3 = 0 OR g.id < $3)
		ORDER BY g.id DESC LIMIT $4`, build, suite, beforeID, max(limit, 1))
	if err != nil {
		return nil, fmt.Errorf("store: alert groups for build: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (AlertGroup, error) {
		g, err := scanGroup(r)
		return *g, err
	})
}
