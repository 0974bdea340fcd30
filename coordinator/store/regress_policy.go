package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// This file holds the per-suite regression policies (webhook, confirmation
// reruns; table regress_policies).

// RegressPolicy is the per-suite regression policy. The zero value (no
// webhook, no confirmation) applies to suites without a stored policy.
type RegressPolicy struct {
	Suite              string    `json:"suite"`
	WebhookURL         string    `json:"webhook_url"`
	WebhookSecret      string    `json:"-"`
	ConfirmRerun       bool      `json:"confirm_rerun"`
	NotifyImprovements bool      `json:"notify_improvements"`
	UpdatedAt          time.Time `json:"updated_at"`
}

// SetRegressPolicy creates or replaces the policy of p.Suite.
func (s *Store) SetRegressPolicy(ctx context.Context, p *RegressPolicy) error {
	if p.Suite == "" {
		return errors.New("store: regress policy: suite is required")
	}
	if p.WebhookURL != "" && !strings.HasPrefix(p.WebhookURL, "http://") && !strings.HasPrefix(p.WebhookURL, "https://") {
		return fmt.Errorf("store: regress policy: webhook url %q must be http(s)", p.WebhookURL)
	}
	_, err := s.pool.Exec(ctx, `
		INSERT INTO regress_policies (suite, webhook_url, webhook_secret, confirm_rerun, notify_improvements)
		VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (suite) DO UPDATE SET webhook_url = EXCLUDED.webhook_url, webhook_secret = EXCLUDED.webhook_secret,
			confirm_rerun = EXCLUDED.confirm_rerun, notify_improvements = EXCLUDED.notify_improvements, updated_at = now()`,
		p.Suite, p.WebhookURL, p.WebhookSecret, p.ConfirmRerun, p.NotifyImprovements)
	return err
}

// GetRegressPolicy returns the policy of suite, or the zero policy (with
// Suite set) when none is stored.
func (s *Store) GetRegressPolicy(ctx context.Context, suite string) (*RegressPolicy, error) {
	p := RegressPolicy{Suite: suite}
	err := s.pool.QueryRow(ctx, `SELECT webhook_url, webhook_secret, confirm_rerun, notify_improvements, updated_at
		FROM regress_policies WHERE suite = $1`, suite).Scan(&p.WebhookURL, &p.WebhookSecret, &p.ConfirmRerun, &p.NotifyImprovements, &p.UpdatedAt)
	err = notFound(err)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return nil, err
	}
	return &p, nil
}
