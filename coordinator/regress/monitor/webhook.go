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

// WebhookEvent is the JSON body of a webhook notification: Event is
// "alert_group" for a new alert group, or "bisection_" + the state a
// bisection of Group ended in ("bisection_culprit", "bisection_not_reproduced",
// "bisection_ambiguous", "bisection_failed", "bisection_cancelled"), with
// Bisection set.
type WebhookEvent struct {
	Event      string            `json:"event"`
	DeliveryID int64             `json:"delivery_id"`
	Group      *store.AlertGroup `json:"group"`
	Bisection  *BisectionNotice  `json:"bisection,omitempty"`
}

// BisectionNotice is how a bisection ended, in a webhook event: its
// state and one-line reason, and for a culprit the last good and first bad
// builds with their git shas and the git log range between them.
type BisectionNotice struct {
	ID            int64   `json:"id"`
	AlertID       int64   `json:"alert_id"`
	Suite         string  `json:"suite"`
	Lineage       string  `json:"lineage"`
	Config        string  `json:"config"`
	Metric        string  `json:"metric"`
	DeviceModel   string  `json:"device_model"`
	DeviceID      string  `json:"device_id"`
	State         string  `json:"state"`
	Reason        string  `json:"reason"`
	LastGoodBuild string  `json:"last_good_build,omitempty"`
	LastGoodSHA   string  `json:"last_good_sha,omitempty"`
	FirstBadBuild string  `json:"first_bad_build,omitempty"`
	FirstBadSHA   string  `json:"first_bad_sha,omitempty"`
	GitLog        string  `json:"git_log,omitempty"`
	Steps         int     `json:"steps"`
	Runs          int     `json:"runs"`
	DeviceSeconds float64 `json:"device_seconds"`
	BudgetSeconds float64 `json:"budget_seconds"`
	RequestedBy   string  `json:"requested_by"`
}

// bisectionNotice reads bisection id as a webhook event's notice.
func (m *Monitor) bisectionNotice(ctx context.Context, id int64) (*BisectionNotice, error) {
	bs, err := m.cfg.Store.GetBisection(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("load bisection %d: %w", id, err)
	}
	steps, err := m.cfg.Store.BisectionSteps(ctx, id)
	if err != nil {
		return nil, err
	}
	n := &BisectionNotice{ID: bs.ID, AlertID: bs.AlertID, Suite: bs.Suite, Lineage: bs.Lineage, Config: bs.Config, Metric: bs.Metric,
		DeviceModel: bs.DeviceModel, DeviceID: bs.DeviceID, State: bs.State, Reason: bs.Reason,
		LastGoodBuild: bs.LastGoodBuild, LastGoodSHA: bs.LastGoodSHA, FirstBadBuild: bs.FirstBadBuild, FirstBadSHA: bs.FirstBadSHA,
		Runs: bs.Runs, DeviceSeconds: bs.DeviceTime.Seconds(), BudgetSeconds: bs.Budget.Seconds(), RequestedBy: bs.RequestedBy}
	if bs.LastGoodSHA != "" && bs.FirstBadSHA != "" {
		n.GitLog = "git log " + bs.LastGoodSHA + ".." + bs.FirstBadSHA
	}
	for _, st := range steps {
		if st.State == store.StepDone {
			n.Steps++
		}
	}
	return n, nil
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
	ev := WebhookEvent{Event: "alert_group", DeliveryID: d.ID, Group: g}
	if d.BisectionID != 0 {
		if ev.Bisection, err = m.bisectionNotice(ctx, d.BisectionID); err != nil {
			return err
		}
		ev.Event = "bisection_" + ev.Bisection.State
	}
	body, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.URL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "lesfarm-regress")
	req.Header.Set(HeaderEvent, ev.Event)
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
