package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/lesfarm/lesfarm/protocol"
)

// ArtifactModelParams are the arguments of SetArtifactModel.
type ArtifactModelParams struct {
	SHA256 string
	// Facts are the model facts of a GGUF artifact; nil for none.
	Facts *protocol.ModelFacts
	// Error says why a GGUF-looking file has no facts (bad header).
	Error string
}

// SetArtifactModel records the model facts of an artifact (migration
// 00024) and marks it analysed. It returns ErrNotFound for an unknown
// digest.
func (s *Store) SetArtifactModel(ctx context.Context, p *ArtifactModelParams) error {
	var facts []byte
	if p.Facts != nil {
		var err error
		if facts, err = json.Marshal(p.Facts); err != nil {
			return fmt.Errorf("store: set artifact model: %w", err)
		}
	}
	tag, err := s.pool.Exec(ctx, `UPDATE artifacts SET model_facts = $2, model_error = $3, model_checked_at = now()
		WHERE sha256 = $1`, p.SHA256, facts, clipText(p.Error))
	if err != nil {
		return fmt.Errorf("store: set artifact model: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	return nil
}

// ArtifactModelFacts returns the recorded model facts of the artifact with
// digest sha, or nil (and no error) when there are none: unknown digest,
// non-GGUF content, or not analysed.
func (s *Store) ArtifactModelFacts(ctx context.Context, sha string) (*protocol.ModelFacts, error) {
	var raw []byte
	err := s.pool.QueryRow(ctx, `SELECT model_facts FROM artifacts WHERE sha256 = $1`, sha).Scan(&raw)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("store: artifact model facts: %w", err)
	}
	return decodeModelFacts(raw)
}

// decodeModelFacts decodes a model_facts column (NULL gives nil).
func decodeModelFacts(raw []byte) (*protocol.ModelFacts, error) {
	if raw == nil {
		return nil, nil
	}
	var f protocol.ModelFacts
	if err := json.Unmarshal(raw, &f); err != nil {
		return nil, fmt.Errorf("store: artifact model facts: %w", err)
	}
	return &f, nil
}
