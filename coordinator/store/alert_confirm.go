package store

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
)

// This file resolves pending confirmation reruns of alert groups.

// PendingConfirmations returns the alerts of series seriesID whose group
// awaits a confirmation rerun.
func (s *Store) PendingConfirmations(ctx context.Context, seriesID int64) ([]Alert, error) {
	rows, err := s.pool.Query(ctx, `SELECT a.id, a.group_id, a.seq, a.direction FROM alerts a JOIN alert_groups g ON g.id = a.group_id
		WHERE a.series_id = $1 AND g.confirmation = 'pending' ORDER BY a.id`, seriesID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Alert, error) {
		var a Alert
		err := r.Scan(&a.ID, &a.GroupID, &a.Seq, &a.Direction)
		a.Series.ID = seriesID
		return a, err
	})
}

// ResolveConfirmation ends a group's pending confirmation. Confirmed
// groups get their webhook queued (per the suite policy); refuted groups
// are marked invalid with note. It is a no-op for groups not pending.
func (s *Store) ResolveConfirmation(ctx context.Context, groupID int64, confirmed bool, note string) error {
	return s.tx(ctx, func(tx pgx.Tx) error {
		var suite string
		var regression bool
		err := tx.QueryRow(ctx, `SELECT suite, regression FROM alert_groups WHERE id = $1 AND confirmation = 'pending' FOR UPDATE`, groupID).Scan(&suite, &regression)
		err = notFound(err)
		if errors.Is(err, ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if !confirmed {
			if _, err := tx.Exec(ctx, `UPDATE alert_groups SET confirmation = 'refuted', status = 'invalid', note = $2, updated_at = now() WHERE id = $1`, groupID, note); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `UPDATE alerts SET status = 'invalid', note = $2, updated_at = now() WHERE group_id = $1`, groupID, note)
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE alert_groups SET confirmation = 'confirmed', updated_at = now() WHERE id = $1`, groupID); err != nil {
			return err
		}
		policy := RegressPolicy{}
		err = tx.QueryRow(ctx, `SELECT webhook_url, webhook_secret, notify_improvements FROM regress_policies WHERE suite = $1`, suite).
			Scan(&policy.WebhookURL, &policy.WebhookSecret, &policy.NotifyImprovements)
		err = notFound(err)
		if errors.Is(err, ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if policy.WebhookURL != "" && (regression || policy.NotifyImprovements) {
			return enqueueWebhook(ctx, tx, groupID, policy)
		}
		return nil
	})
}
