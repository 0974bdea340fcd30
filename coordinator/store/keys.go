package store

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"fmt"

	"github.com/lesfarm/lesfarm/protocol"
)

const signingKeyMeta = "assignment_signing_key"

// SigningKey returns the ed25519 key that signs assignments, creating it on
// first use. It lives in the meta table so every coordinator sharing the
// database signs with the same key and agents can pin one public key.
func (s *Store) SigningKey(ctx context.Context) (ed25519.PrivateKey, error) {
	_, priv, err := protocol.GenerateSigningKey()
	if err != nil {
		return nil, err
	}
	var enc string
	err = s.pool.QueryRow(ctx, `WITH ins AS (
			INSERT INTO meta (key, value) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING RETURNING value)
		SELECT value FROM ins UNION ALL SELECT value FROM meta WHERE key = $1 LIMIT 1`,
		signingKeyMeta, base64.StdEncoding.EncodeToString(priv.Seed())).Scan(&enc)
	if err != nil {
		return nil, fmt.Errorf("store: signing key: %w", err)
	}
	seed, err := base64.StdEncoding.DecodeString(enc)
	if err != nil || len(seed) != ed25519.SeedSize {
		return nil, fmt.Errorf("store: signing key in meta is corrupt")
	}
	return ed25519.NewKeyFromSeed(seed), nil
}
