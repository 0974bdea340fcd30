package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lesfarm/lesfarm/protocol"
)

// Artifact is the metadata of a file in the content-addressed artifact
// store (coordinator/artifact holds the bytes).
type Artifact struct {
	SHA256         string    `json:"sha256"`
	Size           int64     `json:"size"`
	Name           string    `json:"name"`
	CreatedAt      time.Time `json:"created_at"`
	LastAccessedAt time.Time `json:"last_accessed_at"`
	Pinned         bool      `json:"pinned"`
	// Model, ModelError and ModelCheckedAt: see artifact_meta.go.
	Model          *protocol.ModelFacts `json:"model,omitempty" doc:"Facts read from the GGUF header (absent for other content or when not analysed)."`
	ModelError     string               `json:"model_error,omitempty" doc:"Why a GGUF-looking file has no model facts."`
	ModelCheckedAt *time.Time           `json:"model_checked_at,omitempty" doc:"When the header was analysed; absent for artifacts stored before analysis existed."`
}

const artifactCols = `sha256, size_bytes, name, created_at, last_accessed_at, pinned, model_facts, model_error, model_checked_at`

func scanArtifact(row pgx.Row) (*Artifact, error) {
	var a Artifact
	var facts []byte
	if err := row.Scan(&a.SHA256, &a.Size, &a.Name, &a.CreatedAt, &a.LastAccessedAt, &a.Pinned, &facts, &a.ModelError, &a.ModelCheckedAt); err != nil {
		return nil, err
	}
	var err error
	if a.Model, err = decodeModelFacts(facts); err != nil {
		return nil, err
	}
	return &a, nil
}

// PutArtifact records an artifact, or refreshes the access time of an
// existing one, and returns the row. An existing artifact keeps its first
// name (name is used only when it had none): identical bytes uploaded
// under another name must not rename what suites and builds show (issue
// 29, finding 12); the content is the artifact, the name a label.
func (s *Store) PutArtifact(ctx context.Context, sha string, size int64, name string) (*Artifact, error) {
	a, err := scanArtifact(s.pool.QueryRow(ctx, `
		INSERT INTO artifacts (sha256, size_bytes, name) VALUES ($1, $2, $3)
		ON CONFLICT (sha256) DO UPDATE SET last_accessed_at = now(),
			name = CASE WHEN artifacts.name = '' THEN EXCLUDED.name ELSE artifacts.name END
		RETURNING `+artifactCols, sha, size, name))
	if err != nil {
		return nil, fmt.Errorf("store: put artifact: %w", err)
	}
	return a, nil
}

// GetArtifact returns the artifact with the given digest, or ErrNotFound.
func (s *Store) GetArtifact(ctx context.Context, sha string) (*Artifact, error) {
	a, err := scanArtifact(s.pool.QueryRow(ctx, `SELECT `+artifactCols+` FROM artifacts WHERE sha256 = $1`, sha))
	err = notFound(err)
	if errors.Is(err, ErrNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("store: get artifact: %w", err)
	}
	return a, nil
}

// TouchArtifact records a download, which protects the artifact from
// garbage collection for the grace period. Touching is best-effort and
// throttled to once a minute per artifact.
func (s *Store) TouchArtifact(ctx context.Context, sha string) error {
	_, err := s.pool.Exec(ctx, `UPDATE artifacts SET last_accessed_at = now()
		WHERE sha256 = $1 AND last_accessed_at < now() - interval '1 minute'`, sha)
	if err != nil {
		return fmt.Errorf("store: touch artifact: %w", err)
	}
	return nil
}

// SetArtifactPinned pins or unpins an artifact; pinned artifacts are never
// garbage-collected. It returns ErrNotFound for an unknown digest.
func (s *Store) SetArtifactPinned(ctx context.Context, sha string, pinned bool) (*Artifact, error) {
	a, err := scanArtifact(s.pool.QueryRow(ctx,
		`UPDATE artifacts SET pinned = $2 WHERE sha256 = $1 RETURNING `+artifactCols, sha, pinned))
	err = notFound(err)
	if errors.Is(err, ErrNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("store: pin artifact: %w", err)
	}
	return a, nil
}

// ListArtifactsParams pages through artifacts in digest order.
type ListArtifactsParams struct {
	// After is the cursor: only digests greater than it are returned.
	After string
	Limit int
}

// ListArtifacts returns up to p.Limit artifacts after the cursor, in
// digest order.
func (s *Store) ListArtifacts(ctx context.Context, p *ListArtifactsParams) ([]Artifact, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+artifactCols+` FROM artifacts WHERE sha256 > $1 ORDER BY sha256 LIMIT $2`,
		p.After, max(p.Limit, 1))
	if err != nil {
		return nil, fmt.Errorf("store: list artifacts: %w", err)
	}
	defer rows.Close()
	var out []Artifact
	for rows.Next() {
		a, err := scanArtifact(rows)
		if err != nil {
			return nil, fmt.Errorf("store: list artifacts: %w", err)
		}
		out = append(out, *a)
	}
	return out, rows.Err()
}

// DeleteArtifact removes the artifact row; the caller removes the file.
// It returns ErrNotFound for an unknown digest.
func (s *Store) DeleteArtifact(ctx context.Context, sha string) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM artifacts WHERE sha256 = $1`, sha)
	if err != nil {
		return fmt.Errorf("store: delete artifact: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	return nil
}

// artifactUnreferenced is the SQL condition (over alias a) that nothing
// still needs artifact a: no suite's model, no schedule's override model and
// no unfinished run's job snapshot names its sha256. (Finished runs' job
// snapshots do not keep a model alive.)
const artifactUnreferenced = `NOT EXISTS (SELECT 1 FROM suites su WHERE su.spec->'model'->>'sha256' = a.sha256)
	AND NOT EXISTS (SELECT 1 FROM schedules sc WHERE sc.config_override->'model'->>'sha256' = a.sha256)
	AND NOT EXISTS (SELECT 1 FROM runs r JOIN jobs j ON j.id = r.job_id
		WHERE r.state IN ('queued', 'assigned', 'running') AND j.spec->'model'->>'sha256' = a.sha256)`

// ArtifactGCCandidates returns unpinned, unreferenced artifacts last
// uploaded or downloaded before cutoff.
func (s *Store) ArtifactGCCandidates(ctx context.Context, cutoff time.Time) ([]Artifact, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+artifactCols+` FROM artifacts a
		WHERE NOT a.pinned AND a.last_accessed_at < $1 AND `+artifactUnreferenced+` ORDER BY a.sha256`, cutoff)
	if err != nil {
		return nil, fmt.Errorf("store: artifact gc candidates: %w", err)
	}
	defer rows.Close()
	var out []Artifact
	for rows.Next() {
		a, err := scanArtifact(rows)
		if err != nil {
			return nil, fmt.Errorf("store: artifact gc candidates: %w", err)
		}
		out = append(out, *a)
	}
	return out, rows.Err()
}

// DeleteArtifactIfUnused deletes the artifact row if it is still a GC
// candidate (every condition re-checked atomically) and reports whether
// it did.
func (s *Store) DeleteArtifactIfUnused(ctx context.Context, sha string, cutoff time.Time) (bool, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM artifacts a
		WHERE a.sha256 = $1 AND NOT a.pinned AND a.last_accessed_at < $2 AND `+artifactUnreferenced, sha, cutoff)
	if err != nil {
		return false, fmt.Errorf("store: delete unused artifact: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}
