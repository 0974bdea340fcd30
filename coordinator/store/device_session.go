package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrSuperseded is returned by TouchDeviceSession when another agent
// session has taken the device over (a newer hello).
var ErrSuperseded = errors.New("store: device taken over by another agent session")

// ClaimDeviceSession makes session the device's agent session (the newest
// hello takes the device over) and returns the session it replaces ("" if
// none or the same). The device must exist (UpsertDevice first).
func (s *Store) ClaimDeviceSession(ctx context.Context, id, session string) (previous string, err error) {
	err = s.pool.QueryRow(ctx, `UPDATE devices d SET session = $2 FROM (SELECT id, session FROM devices WHERE id = $1 FOR UPDATE) old
		WHERE d.id = old.id RETURNING old.session`, id, session).Scan(&previous)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", ErrNotFound
	}
	if err != nil {
		return "", fmt.Errorf("store: claim device session: %w", err)
	}
	if previous == session {
		previous = ""
	}
	return previous, nil
}

// TouchDeviceSession is TouchDevice for a heartbeat of agent session
// session: ErrSuperseded when the device now belongs to another session,
// ErrNotFound when it is unknown or lost.
func (s *Store) TouchDeviceSession(ctx context.Context, id, session string, ttl time.Duration, coordinator string) error {
	tag, err := s.pool.Exec(ctx, `UPDATE devices SET last_seen_at = now(), ttl_ms = $2, coordinator = $3
		FROM `+asyncCommit+` WHERE id = $1 AND state = 'online' AND session IN ($4, '')`, id, ttl.Milliseconds(), coordinator, session)
	if err != nil {
		return fmt.Errorf("store: touch device: %w", err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	cur, err := s.DeviceSession(ctx, id)
	switch {
	case err != nil:
		return err
	case cur != session && cur != "":
		return ErrSuperseded
	}
	return ErrNotFound
}

// DeviceSession returns the device's agent session ("" for an agent from
// before sessions), or ErrNotFound.
func (s *Store) DeviceSession(ctx context.Context, id string) (string, error) {
	var session string
	err := s.pool.QueryRow(ctx, `SELECT session FROM devices WHERE id = $1`, id).Scan(&session)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", ErrNotFound
	}
	if err != nil {
		return "", fmt.Errorf("store: device session: %w", err)
	}
	return session, nil
}
