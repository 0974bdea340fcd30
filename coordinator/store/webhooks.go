package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// This file is the webhook outbox: deliveries queued with alert groups
// and with ended bisections (migration 00066), claimed under a lease,
// finished or retried.

// WebhookDelivery is one queued webhook notification: of alert group
// GroupID, or, when BisectionID is not 0, of that bisection's end.
type WebhookDelivery struct {
	ID          int64
	GroupID     int64
	BisectionID int64
	URL         string
	Secret      string
	Attempts    int
}

// ClaimWebhookDeliveries claims up to limit due deliveries for lease: they
// are invisible to other claimers until the lease ends, so a coordinator
// that dies mid-delivery only delays the retry.
func (s *Store) ClaimWebhookDeliveries(ctx context.Context, limit int, lease time.Duration) ([]WebhookDelivery, error) {
	rows, err := s.pool.Query(ctx, `
		UPDATE webhook_deliveries d SET next_attempt_at = now() + make_interval(secs => $2), attempts = d.attempts + 1
		WHERE d.id IN (SELECT id FROM webhook_deliveries WHERE status = 'pending' AND next_attempt_at <= now()
			ORDER BY next_attempt_at LIMIT $1 FOR UPDATE SKIP LOCKED)
		RETURNING d.id, d.group_id, coalesce(d.bisection_id, 0), d.url, d.secret, d.attempts`, limit, lease.Seconds())
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (WebhookDelivery, error) {
		var d WebhookDelivery
		err := r.Scan(&d.ID, &d.GroupID, &d.BisectionID, &d.URL, &d.Secret, &d.Attempts)
		return d, err
	})
}

// FinishWebhookDelivery records the outcome of an attempt: delivered when
// errMsg is empty; otherwise retried at retryAt, or failed for good when
// retryAt is zero.
func (s *Store) FinishWebhookDelivery(ctx context.Context, id int64, errMsg string, retryAt time.Time) error {
	var err error
	switch {
	case errMsg == "":
		_, err = s.pool.Exec(ctx, `UPDATE webhook_deliveries SET status = 'delivered', delivered_at = now(), last_error = '' WHERE id = $1`, id)
	case retryAt.IsZero():
		_, err = s.pool.Exec(ctx, `UPDATE webhook_deliveries SET status = 'failed', last_error = $2 WHERE id = $1`, id, errMsg)
	default:
		_, err = s.pool.Exec(ctx, `UPDATE webhook_deliveries SET next_attempt_at = $3, last_error = $2 WHERE id = $1`, id, errMsg, retryAt)
	}
	return err
}

// WebhookDeliveryStatus returns the status, attempts and last error of the
// deliveries of a group (not those of its bisections), keyed by URL (for
// the API and tests).
func (s *Store) WebhookDeliveryStatus(ctx context.Context, groupID int64) (map[string][3]string, error) {
	return s.webhookStatus(ctx, `group_id = $1 AND bisection_id IS NULL`, groupID)
}

// BisectionWebhookStatus is WebhookDeliveryStatus for the deliveries of
// bisection id's end.
func (s *Store) BisectionWebhookStatus(ctx context.Context, id int64) (map[string][3]string, error) {
	return s.webhookStatus(ctx, `bisection_id = $1`, id)
}

func (s *Store) webhookStatus(ctx context.Context, where string, id int64) (map[string][3]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT url, status, attempts::text, last_error FROM webhook_deliveries WHERE `+where, id)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string][3]string{}
	for rows.Next() {
		var u, st, at, le string
		if err := rows.Scan(&u, &st, &at, &le); err != nil {
			return nil, err
		}
		out[u] = [3]string{st, at, le}
	}
	return out, rows.Err()
}

// enqueueBisectionWebhook queues the notification of bisection id's end
// to its suite's regression webhook, when the suite has one (in the
// transaction that ends it, so an end is notified exactly when stored).
func enqueueBisectionWebhook(ctx context.Context, tx pgx.Tx, id int64) error {
	_, err := tx.Exec(ctx, `INSERT INTO webhook_deliveries (group_id, bisection_id, url, secret)
		SELECT b.group_id, b.id, p.webhook_url, p.webhook_secret FROM bisections b JOIN regress_policies p ON p.suite = b.suite
		WHERE b.id = $1 AND p.webhook_url <> ''
		ON CONFLICT (bisection_id, url) WHERE bisection_id IS NOT NULL DO NOTHING`, id)
	return err
}
