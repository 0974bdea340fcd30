package store

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// DeviceSecretPrefix starts every device credential secret, so a leaked one
// is easy to recognise (and tell apart from an API token, "lft_").
const DeviceSecretPrefix = "lfd_"

// ErrBadDeviceCredential is returned by VerifyDeviceCredential for an
// unknown, malformed, revoked or expired secret.
var ErrBadDeviceCredential = errors.New("store: invalid, revoked or expired device credential")

// DeviceCredential is the stored description of a device's NATS secret.
// The secret itself is never stored; only its sha256 is.
type DeviceCredential struct {
	ID         int64      `json:"id"`
	DeviceID   string     `json:"device_id"`
	Prefix     string     `json:"prefix"`
	CreatedAt  time.Time  `json:"created_at"`
	LastUsedAt *time.Time `json:"last_used_at,omitempty"`
	RevokedAt  *time.Time `json:"revoked_at,omitempty"`
	// ExpiresAt is when the credential stops working; nil never.
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// DeviceCredentialParams describe a new device credential.
type DeviceCredentialParams struct {
	// DeviceID is the device the credential is bound to.
	DeviceID string
	// ExpiresIn, when positive, ends the credential's life that long
	// after its creation (by the database's clock); zero never expires.
	ExpiresIn time.Duration
}

// credDeviceIDRE is protocol.ValidDeviceID's rule (the store does not import
// protocol); the table's CHECK constraint enforces it too.
var credDeviceIDRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// CreateDeviceCredential creates a credential bound to deviceID and returns
// its secret ("lfd_" and 256 random bits), which is not stored and cannot be
// recovered later. A device may hold several live credentials (rotation:
// create the new one, switch the agent, revoke the old one).
func (s *Store) CreateDeviceCredential(ctx context.Context, deviceID string) (string, *DeviceCredential, error) {
	return s.CreateDeviceCredentialWith(ctx, &DeviceCredentialParams{DeviceID: deviceID})
}

// CreateDeviceCredentialWith creates a credential as p describes (see
// CreateDeviceCredential) and returns its secret.
func (s *Store) CreateDeviceCredentialWith(ctx context.Context, p *DeviceCredentialParams) (string, *DeviceCredential, error) {
	deviceID := p.DeviceID
	if p.ExpiresIn < 0 {
		return "", nil, fmt.Errorf("store: credential expiry must not be negative")
	}
	if !credDeviceIDRE.MatchString(deviceID) {
		return "", nil, fmt.Errorf("store: device id %q: want 1 to 64 letters, digits, '_' or '-'", deviceID)
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", nil, fmt.Errorf("store: device credential: %w", err)
	}
	secret := DeviceSecretPrefix + strings.ToLower(tokenEncoding.EncodeToString(b[:]))
	c := &DeviceCredential{DeviceID: deviceID, Prefix: secret[:len(DeviceSecretPrefix)+6]}
	err := s.pool.QueryRow(ctx,
		`INSERT INTO device_credentials (device_id, prefix, token_hash, expires_at) VALUES ($1, $2, $3, `+expiresSQL+`) RETURNING id, created_at, expires_at`,
		c.DeviceID, c.Prefix, hashToken(secret), p.ExpiresIn.Microseconds()).Scan(&c.ID, &c.CreatedAt, &c.ExpiresAt)
	if err != nil {
		return "", nil, fmt.Errorf("store: create device credential: %w", err)
	}
	return secret, c, nil
}

// VerifyDeviceCredential returns the live (neither revoked nor expired)
// credential whose secret is secret, or ErrBadDeviceCredential. It records the use at most once a
// minute per credential.
func (s *Store) VerifyDeviceCredential(ctx context.Context, secret string) (*DeviceCredential, error) {
	if !strings.HasPrefix(secret, DeviceSecretPrefix) || len(secret) > 200 {
		return nil, ErrBadDeviceCredential
	}
	h := hashToken(secret)
	var c DeviceCredential
	var stored []byte
	err := s.pool.QueryRow(ctx,
		`SELECT id, device_id, prefix, token_hash, created_at, last_used_at, expires_at FROM device_credentials
		 WHERE token_hash = $1 AND `+liveSecret, h).
		Scan(&c.ID, &c.DeviceID, &c.Prefix, &stored, &c.CreatedAt, &c.LastUsedAt, &c.ExpiresAt)
	if err != nil {
		err = notFound(err)
		if errors.Is(err, ErrNotFound) {
			return nil, ErrBadDeviceCredential
		}
		return nil, fmt.Errorf("store: verify device credential: %w", err)
	}
	if subtle.ConstantTimeCompare(stored, h) != 1 {
		return nil, ErrBadDeviceCredential
	}
	if c.LastUsedAt == nil || time.Since(*c.LastUsedAt) > time.Minute {
		if _, err := s.pool.Exec(ctx, `UPDATE device_credentials`+touchLastUsed, c.ID); err != nil {
			return nil, fmt.Errorf("store: verify device credential: %w", err)
		}
	}
	return &c, nil
}

// ListDeviceCredentials returns every device credential (live and
// revoked), newest first; deviceID, when not empty, keeps one device's.
func (s *Store) ListDeviceCredentials(ctx context.Context, deviceID string) ([]DeviceCredential, error) {
	rows, err := s.pool.Query(ctx,
		`SELECT id, device_id, prefix, created_at, last_used_at, revoked_at, expires_at FROM device_credentials
		 WHERE $1 = '' OR device_id = $1 ORDER BY id DESC`, deviceID)
	if err != nil {
		return nil, fmt.Errorf("store: list device credentials: %w", err)
	}
	defer rows.Close()
	var out []DeviceCredential
	for rows.Next() {
		var c DeviceCredential
		if err := rows.Scan(&c.ID, &c.DeviceID, &c.Prefix, &c.CreatedAt, &c.LastUsedAt, &c.RevokedAt, &c.ExpiresAt); err != nil {
			return nil, fmt.Errorf("store: list device credentials: %w", err)
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// RevokeDeviceCredential revokes the credential with the given id. New
// connections presenting it are refused at once; a connection already open
// stays until it reconnects (lesfarm serve disconnects it, see natsauth).
// It returns the revoked credential, or ErrNotFound when no live credential
// has that id.
func (s *Store) RevokeDeviceCredential(ctx context.Context, id int64) (*DeviceCredential, error) {
	var c DeviceCredential
	err := s.pool.QueryRow(ctx,
		`UPDATE device_credentials SET revoked_at = now() WHERE id = $1 AND revoked_at IS NULL
		 RETURNING id, device_id, prefix, created_at, last_used_at, revoked_at, expires_at`, id).
		Scan(&c.ID, &c.DeviceID, &c.Prefix, &c.CreatedAt, &c.LastUsedAt, &c.RevokedAt, &c.ExpiresAt)
	if err != nil {
		err = notFound(err)
		if errors.Is(err, ErrNotFound) {
			return nil, ErrNotFound
		}
		return nil, fmt.Errorf("store: revoke device credential: %w", err)
	}
	return &c, nil
}
