package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

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
// digest sha, or nil when there are none (non-GGUF content, unreadable
// header, unknown digest), and whether the artifact's header was analysed.
// analysed is false only for a stored artifact that was never analysed
// (stored before migration 00024); it is true for an unknown digest, since
// there is nothing to analyse.
func (s *Store) ArtifactModelFacts(ctx context.Context, sha string) (facts *protocol.ModelFacts, analysed bool, err error) {
	var raw []byte
	var checked bool
	err = s.pool.QueryRow(ctx, `SELECT model_facts, model_checked_at IS NOT NULL FROM artifacts WHERE sha256 = $1`, sha).Scan(&raw, &checked)
	err = notFound(err)
	if errors.Is(err, ErrNotFound) {
		return nil, true, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("store: artifact model facts: %w", err)
	}
	facts, err = decodeModelFacts(raw)
	return facts, checked, err
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
