package monitor

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/store"
)

// WebhookEvent is the JSON body of a webhook notification.
type WebhookEvent struct {
	Event      string            `json:"event"` // "alert_group"
	DeliveryID int64             `json:"delivery_id"`
	Group      *store.AlertGroup `json:"group"`
}

// Webhook request headers. X-Lesfarm-Delivery is stable across retries of
// one delivery, so receivers can drop duplicates; X-Lesfarm-Signature is
// "sha256=" + hex HMAC-SHA256 of the body with the suite's webhook secret,
// present when a secret is configured.
const (
	HeaderEvent     = "X-Lesfarm-Event"
	HeaderDelivery  = "X-Lesfarm-Delivery"
	HeaderSignature = "X-Lesfarm-Signature"
)

// Start runs the webhook delivery loop until ctx is cancelled or Stop is
// called (coordinator/startstop semantics). It returns at once, and never
// an error.
func (m *Monitor) Start(ctx context.Context) error {
	return m.ss.StartFunc(ctx, nil, func(ctx context.Context) {
		t := time.NewTicker(m.cfg.PollInterval)
		defer t.Stop()
		for {
			m.DeliverDue(ctx)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			case <-m.wake:
			}
		}
	})
}

// Started is closed once the delivery loop runs.
func (m *Monitor) Started() <-chan struct{} { return m.ss.Started() }

// Stop ends the delivery loop and waits for it; it is idempotent.
func (m *Monitor) Stop() { m.ss.Stop() }

// DeliverDue sends every due webhook delivery once and records the
// outcome; failures are retried later with exponential backoff. It returns
// the number of deliveries attempted.
func (m *Monitor) DeliverDue(ctx context.Context) int {
	n := 0
	for ctx.Err() == nil {
		// The claim lease outlives one HTTP attempt, so no other
		// coordinator sends the same delivery concurrently.
		ds, err := m.cfg.Store.ClaimWebhookDeliveries(ctx, 16, m.cfg.HTTPClient.Timeout+time.Minute)
		if err != nil {
			if ctx.Err() == nil {
				m.log.ErrorContext(ctx, "regress: claim webhook deliveries", "err", err)
			}
			return n
		}
		if len(ds) == 0 {
			return n
		}
		for _, d := range ds {
			n++
			err := m.send(ctx, d)
			msg, retryAt := "", time.Time{}
			if err != nil {
				msg = err.Error()
				if d.Attempts < m.cfg.MaxAttempts {
					backoff := m.cfg.RetryBase << min(d.Attempts-1, 30)
					retryAt = time.Now().Add(min(backoff, m.cfg.RetryMax))
				}
				m.log.WarnContext(ctx, "regress: webhook failed", "delivery_id", d.ID, "group_id", d.GroupID,
					"attempt", d.Attempts, "final", retryAt.IsZero(), "err", err)
			}
			if err := m.cfg.Store.FinishWebhookDelivery(context.WithoutCancel(ctx), d.ID, msg, retryAt); err != nil {
				m.log.ErrorContext(ctx, "regress: record webhook outcome", "delivery_id", d.ID, "err", err)
			}
		}
	}
	return n
}

func (m *Monitor) send(ctx context.Context, d store.WebhookDelivery) error {
	g, err := m.cfg.Store.GetAlertGroup(ctx, d.GroupID)
	if err != nil {
		return fmt.Errorf("load group %d: %w", d.GroupID, err)
	}
	body, err := json.Marshal(WebhookEvent{Event: "alert_group", DeliveryID: d.ID, Group: g})
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.URL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "lesfarm-regress")
	req.Header.Set(HeaderEvent, "alert_group")
	req.Header.Set(HeaderDelivery, strconv.FormatInt(d.ID, 10))
	if d.Secret != "" {
		mac := hmac.New(sha256.New, []byte(d.Secret))
		mac.Write(body)
		req.Header.Set(HeaderSignature, "sha256="+hex.EncodeToString(mac.Sum(nil)))
	}
	resp, err := m.cfg.HTTPClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("webhook %s: HTTP %d", d.URL, resp.StatusCode)
	}
	return nil
}
