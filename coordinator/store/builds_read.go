package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/lesfarm/lesfarm/coordinator/builds"
)

// buildCols are the builds columns with the build's run and alert group
// counts (runs_build_idx makes the first cheap; alert groups are few).
const buildCols = `b.id, b.lineage, b.position, b.kind, b.git_sha, b.dirty, b.pushed_at, b.pushed_by,
	(SELECT count(*) FROM runs r WHERE r.build = b.id), (SELECT count(*) FROM alert_groups g WHERE g.build = b.id)`

const executableCols = `platform, sha256, size_bytes, go_version, revision, vcs_modified, module_path, main_path, settings`

func scanBuild(row pgx.Row) (*Build, error) {
	var b Build
	if err := row.Scan(&b.ID, &b.Lineage, &b.Position, &b.Kind, &b.GitSHA, &b.Dirty, &b.PushedAt, &b.PushedBy, &b.Runs, &b.Alerts); err != nil {
		return nil, err
	}
	b.Executables = []Executable{}
	return &b, nil
}

func scanExecutable(row pgx.Row, buildID *string) (*Executable, error) {
	var e Executable
	var settings []byte
	dest := []any{&e.Platform, &e.SHA256, &e.Size, &e.GoVersion, &e.Revision, &e.Modified, &e.ModulePath, &e.MainPath, &settings}
	if buildID != nil {
		dest = append(dest, buildID)
	}
	if err := row.Scan(dest...); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(settings, &e.Settings); err != nil {
		return nil, err
	}
	return &e, nil
}

// withExecutables fills the executables of bs (by platform).
func (s *Store) withExecutables(ctx context.Context, bs []*Build) error {
	if len(bs) == 0 {
		return nil
	}
	byID := make(map[string]*Build, len(bs))
	ids := make([]string, 0, len(bs))
	for _, b := range bs {
		byID[b.ID] = b
		ids = append(ids, b.ID)
	}
	rows, err := s.pool.Query(ctx, `SELECT `+executableCols+`, build_id FROM build_executables
		WHERE build_id = ANY($1) ORDER BY build_id, platform`, ids)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		e, err := scanExecutable(rows, &id)
		if err != nil {
			return err
		}
		if b := byID[id]; b != nil {
			b.Executables = append(b.Executables, *e)
		}
	}
	return rows.Err()
}

// queryBuilds runs a builds query (selecting buildCols from builds b) and
// returns the builds with their executables.
func (s *Store) queryBuilds(ctx context.Context, what, sql string, args ...any) ([]Build, error) {
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("store: %s: %w", what, err)
	}
	ptrs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*Build, error) { return scanBuild(r) })
	if err == nil {
		err = s.withExecutables(ctx, ptrs)
	}
	if err != nil {
		return nil, fmt.Errorf("store: %s: %w", what, err)
	}
	out := make([]Build, len(ptrs))
	for i, b := range ptrs {
		out[i] = *b
	}
	return out, nil
}

// GetBuild returns the build with its executables and counts, or
// ErrNotFound.
func (s *Store) GetBuild(ctx context.Context, id string) (*Build, error) {
	bs, err := s.queryBuilds(ctx, "get build", `SELECT `+buildCols+` FROM builds b WHERE b.id = $1`, id)
	if err != nil {
		return nil, err
	}
	if len(bs) == 0 {
		return nil, ErrNotFound
	}
	return &bs[0], nil
}

// LatestBuild returns the newest build (highest position) of lineage
// ("" means DefaultLineage), or ErrNotFound when the lineage has none.
func (s *Store) LatestBuild(ctx context.Context, lineage string) (*Build, error) {
	lineage, err := lineageOr(lineage)
	if err != nil {
		return nil, err
	}
	bs, err := s.queryBuilds(ctx, "latest build", `SELECT `+buildCols+` FROM builds b
		WHERE b.lineage = $1 ORDER BY b.position DESC LIMIT 1`, lineage)
	if err != nil {
		return nil, err
	}
	if len(bs) == 0 {
		return nil, ErrNotFound
	}
	return &bs[0], nil
}

// ListBuildsParams filter ListBuilds.
type ListBuildsParams struct {
	// Lineage, when set, lists only that lineage's builds, newest
	// (highest position) first; without it every build is listed, most
	// recently pushed first.
	Lineage string
	// Limit bounds the list (at least 1).
	Limit int
}

// ListBuilds returns builds with their executables and counts.
func (s *Store) ListBuilds(ctx context.Context, p *ListBuildsParams) ([]Build, error) {
	if p.Lineage != "" {
		return s.queryBuilds(ctx, "list builds", `SELECT `+buildCols+` FROM builds b
			WHERE b.lineage = $1 ORDER BY b.position DESC LIMIT $2`, p.Lineage, max(p.Limit, 1))
	}
	return s.queryBuilds(ctx, "list builds", `SELECT `+buildCols+` FROM builds b
		ORDER BY b.pushed_at DESC, b.id LIMIT $1`, max(p.Limit, 1))
}

// BuildExecutable returns build buildID's executable for platform, or
// ErrNotFound when the build is unknown or has none for that platform.
func (s *Store) BuildExecutable(ctx context.Context, buildID, platform string) (*Executable, error) {
	e, err := scanExecutable(s.pool.QueryRow(ctx, `SELECT `+executableCols+` FROM build_executables
		WHERE build_id = $1 AND platform = $2`, buildID, platform), nil)
	err = notFound(err)
	if errors.Is(err, ErrNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("store: build executable: %w", err)
	}
	return e, nil
}

// nearestScan bounds the ids NearestBuilds compares (the most recently
// pushed).
const nearestScan = 10000

// NearestBuilds returns up to n registered build ids closest to id
// (builds.Nearest: a few edits away, or containing it), the most
// recently pushed first among equally close ones: the "did you mean" of
// an unknown build.
func (s *Store) NearestBuilds(ctx context.Context, id string, n int) ([]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT id FROM builds ORDER BY pushed_at DESC, position DESC LIMIT $1`, nearestScan)
	if err != nil {
		return nil, fmt.Errorf("store: nearest builds: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("store: nearest builds: %w", err)
	}
	return builds.Nearest(id, ids, n), nil
}
