package store

import (
	"context"
	"fmt"
)

// Sides of a build in an A/B comparison, for ListABsOf.
const (
	ABSideBuild    = "build"    // the build under test
	ABSideBaseline = "baseline" // the baseline it is compared with
	ABSideEither   = "either"   // either of the two
)

// ListABsOf lists the comparisons of build newest first, at most limit:
// those where it is under test (side ABSideBuild), those where it is the
// baseline (ABSideBaseline) or both (ABSideEither). An empty build lists
// every comparison; an unknown side is an error.
func (s *Store) ListABsOf(ctx context.Context, build, side string, limit int) ([]ABComparison, error) {
	var where string
	switch side {
	case ABSideBuild, "":
		where = `$1 = '' OR build = $1`
	case ABSideBaseline:
		where = `$1 = '' OR baseline = $1`
	case ABSideEither:
		where = `$1 = '' OR build = $1 OR baseline = $1`
	default:
		return nil, fmt.Errorf("store: list ab: side %q: want build, baseline or either", side)
	}
	rows, err := s.pool.Query(ctx, `SELECT `+abCols+` FROM ab_comparisons WHERE `+where+` ORDER BY id DESC LIMIT $2`, build, max(limit, 1))
	if err != nil {
		return nil, fmt.Errorf("store: list ab: %w", err)
	}
	defer rows.Close()
	var out []ABComparison
	for rows.Next() {
		a, err := scanAB(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, *a)
	}
	return out, rows.Err()
}
