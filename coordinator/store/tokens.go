package store

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base32"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// APITokenPrefix starts every API token secret, so a leaked token is easy to
// recognise (and to grep for) in logs and repositories.
const APITokenPrefix = "lft_"

// ErrUnauthorized is returned by VerifyAPIToken for an unknown, malformed,
// revoked or expired token.
var ErrUnauthorized = errors.New("store: invalid, revoked or expired API token")

// APIToken is the stored description of a bearer token. The secret itself
// is never stored; only its sha256 is.
type APIToken struct {
	ID         int64      `json:"id"`
	Name       string     `json:"name"`
	Prefix     string     `json:"prefix"`
	CreatedAt  time.Time  `json:"created_at"`
	LastUsedAt *time.Time `json:"last_used_at,omitempty"`
	RevokedAt  *time.Time `json:"revoked_at,omitempty"`
	// ExpiresAt is when the token stops working; nil never.
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	// Scopes are what the token may do (Scope* constants), sorted.
	Scopes []string `json:"scopes"`
}

// Has reports whether the token carries scope.
func (t *APIToken) Has(scope string) bool { return slices.Contains(t.Scopes, scope) }

// API token scopes (issue 29, finding 8; docs/security.md "Token scopes").
// Each REST mutation needs one of them (coordinator/api scopes.go).
const (
	// ScopeRead reads everything when the coordinator requires tokens
	// for reads, and shows runs' fencing tokens.
	ScopeRead = "read"
	// ScopeTrigger triggers and cancels runs and edits schedules.
	ScopeTrigger = "trigger"
	// ScopeSuites creates, replaces and deletes suites (what devices run,
	// model URLs included).
	ScopeSuites = "suites"
	// ScopeBuilds pushes builds (executables devices run) and uploads
	// artifacts.
	ScopeBuilds = "builds"
	// ScopeAdmin manages devices, artifacts' lifetime, alerts' triage and
	// the egress allow-list.
	ScopeAdmin = "admin"
)

// AllScopes lists every scope, in the order help texts show them.
var AllScopes = []string{ScopeRead, ScopeTrigger, ScopeSuites, ScopeBuilds, ScopeAdmin}

// ParseScopes checks a list of scope names ("all" stands for every scope)
// and returns it deduplicated and sorted. An empty list is an error.
func ParseScopes(names []string) ([]string, error) {
	var out []string
	for _, n := range names {
		n = strings.ToLower(strings.TrimSpace(n))
		switch {
		case n == "all":
			out = append(out, AllScopes...)
		case slices.Contains(AllScopes, n):
			out = append(out, n)
		default:
			return nil, fmt.Errorf("store: unknown token scope %q (want %s or all)", n, strings.Join(AllScopes, ", "))
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("store: a token needs at least one scope (%s or all)", strings.Join(AllScopes, ", "))
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// ErrTokenNameTaken is returned (wrapping ErrConflict) when a live token
// already has the name asked for.
var ErrTokenNameTaken = fmt.Errorf("%w: a live API token already has this name (revoke it first, or pick another name)", ErrConflict)

// APITokenParams describe a new API token.
type APITokenParams struct {
	// Name says who uses the token (1 to 200 characters).
	Name string
	// ExpiresIn, when positive, ends the token's life that long after its
	// creation (by the database's clock); zero never expires.
	ExpiresIn time.Duration
	// Scopes are what the token may do (see ParseScopes); nil means every
	// scope, as tokens had before scopes existed.
	Scopes []string
}

// liveSecret is the SQL condition of a usable secret: not revoked and not
// expired, by the database's clock.
const liveSecret = `revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())`

// expiresSQL computes expires_at from a duration in microseconds (0: NULL).
const expiresSQL = `CASE WHEN $4::bigint > 0 THEN now() + $4::bigint * interval '1 microsecond' END`

// touchLastUsed records a use of secret $1 unless one was recorded within the
// last minute, so a storm of requests writes at most once a minute.
const touchLastUsed = ` SET last_used_at = now() WHERE id = $1 AND (last_used_at IS NULL OR last_used_at < now() - interval '1 minute')`

var tokenEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// newTokenSecret returns "lft_" followed by 32 random bytes in lowercase
// base32 (52 characters, 256 bits of entropy).
func newTokenSecret() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return APITokenPrefix + strings.ToLower(tokenEncoding.EncodeToString(b[:])), nil
}

// hashToken returns the sha256 of a secret. Tokens carry 256 random bits,
// so a fast hash is enough (no password stretching needed).
func hashToken(secret string) []byte {
	h := sha256.Sum256([]byte(secret))
	return h[:]
}

// CreateAPIToken creates a token named name that never expires and returns
// its secret, which is not stored and cannot be recovered later.
func (s *Store) CreateAPIToken(ctx context.Context, name string) (string, *APIToken, error) {
	return s.CreateAPITokenWith(ctx, &APITokenParams{Name: name})
}

// CreateAPITokenWith creates a token as p describes and returns its secret,
// which is not stored and cannot be recovered later. A name a live token
// already has fails with ErrTokenNameTaken.
func (s *Store) CreateAPITokenWith(ctx context.Context, p *APITokenParams) (string, *APIToken, error) {
	name := strings.TrimSpace(p.Name)
	if p.ExpiresIn < 0 {
		return "", nil, fmt.Errorf("store: token expiry must not be negative")
	}
	if name == "" || len(name) > 200 {
		return "", nil, fmt.Errorf("store: token name must be 1 to 200 characters")
	}
	scopes := AllScopes
	if p.Scopes != nil {
		scopes = p.Scopes
	}
	scopes, err := ParseScopes(scopes)
	if err != nil {
		return "", nil, err
	}
	secret, err := newTokenSecret()
	if err != nil {
		return "", nil, fmt.Errorf("store: token: %w", err)
	}
	t := &APIToken{Name: name, Prefix: secret[:len(APITokenPrefix)+6], Scopes: scopes}
	err = s.pool.QueryRow(ctx,
		`INSERT INTO api_tokens (name, prefix, token_hash, expires_at, scopes) VALUES ($1, $2, $3, `+expiresSQL+`, $5) RETURNING id, created_at, expires_at`,
		t.Name, t.Prefix, hashToken(secret), p.ExpiresIn.Microseconds(), scopes).Scan(&t.ID, &t.CreatedAt, &t.ExpiresAt)
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "23505" && pe.ConstraintName == "api_tokens_live_name" {
		return "", nil, ErrTokenNameTaken
	}
	if err != nil {
		return "", nil, fmt.Errorf("store: create token: %w", err)
	}
	return secret, t, nil
}

// VerifyAPIToken returns the live (neither revoked nor expired) token whose
// secret is secret, or ErrUnauthorized. It records the use at most once a
// minute per token.
func (s *Store) VerifyAPIToken(ctx context.Context, secret string) (*APIToken, error) {
	if !strings.HasPrefix(secret, APITokenPrefix) || len(secret) > 200 {
		return nil, ErrUnauthorized
	}
	h := hashToken(secret)
	var t APIToken
	var stored []byte
	err := s.pool.QueryRow(ctx,
		`SELECT id, name, prefix, token_hash, created_at, last_used_at, expires_at, scopes FROM api_tokens
		 WHERE token_hash = $1 AND `+liveSecret, h).
		Scan(&t.ID, &t.Name, &t.Prefix, &stored, &t.CreatedAt, &t.LastUsedAt, &t.ExpiresAt, &t.Scopes)
	if err != nil {
		err = notFound(err)
		if errors.Is(err, ErrNotFound) {
			return nil, ErrUnauthorized
		}
		return nil, fmt.Errorf("store: verify token: %w", err)
	}
	if subtle.ConstantTimeCompare(stored, h) != 1 {
		return nil, ErrUnauthorized
	}
	if t.LastUsedAt == nil || time.Since(*t.LastUsedAt) > time.Minute {
		if _, err := s.pool.Exec(ctx, `UPDATE api_tokens`+touchLastUsed, t.ID); err != nil {
			return nil, fmt.Errorf("store: verify token: %w", err)
		}
	}
	return &t, nil
}

// ListAPITokens returns every token (live and revoked), newest first.
func (s *Store) ListAPITokens(ctx context.Context) ([]APIToken, error) {
	rows, err := s.pool.Query(ctx,
		`SELECT id, name, prefix, created_at, last_used_at, revoked_at, expires_at, scopes FROM api_tokens ORDER BY id DESC`)
	if err != nil {
		return nil, fmt.Errorf("store: list tokens: %w", err)
	}
	defer rows.Close()
	var out []APIToken
	for rows.Next() {
		var t APIToken
		if err := rows.Scan(&t.ID, &t.Name, &t.Prefix, &t.CreatedAt, &t.LastUsedAt, &t.RevokedAt, &t.ExpiresAt, &t.Scopes); err != nil {
			return nil, fmt.Errorf("store: list tokens: %w", err)
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// RevokeAPIToken revokes the token with the given id. It returns
// ErrNotFound when no live token has that id.
func (s *Store) RevokeAPIToken(ctx context.Context, id int64) error {
	tag, err := s.pool.Exec(ctx, `UPDATE api_tokens SET revoked_at = now() WHERE id = $1 AND revoked_at IS NULL`, id)
	if err != nil {
		return fmt.Errorf("store: revoke token: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	return nil
}
