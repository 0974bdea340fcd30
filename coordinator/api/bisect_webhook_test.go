package api

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/builds/buildstest"
	"github.com/lesfarm/lesfarm/coordinator/regress/monitor"
	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/internal/testenv"
)

// webhookSink is a webhook receiver that fails its first failures
// requests with HTTP 503 and keeps the others' events, checking each
// signature against secret.
type webhookSink struct {
	secret   string
	mu       sync.Mutex
	failures int
	requests int
	badSig   int
	events   []monitor.WebhookEvent
	headers  []http.Header
}

func (h *webhookSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.requests++
	mac := hmac.New(sha256.New, []byte(h.secret))
	mac.Write(body)
	if r.Header.Get(monitor.HeaderSignature) != "sha256="+hex.EncodeToString(mac.Sum(nil)) {
		h.badSig++
	}
	if h.failures > 0 {
		h.failures--
		http.Error(w, "busy", http.StatusServiceUnavailable)
		return
	}
	var ev monitor.WebhookEvent
	if err := json.Unmarshal(body, &ev); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	h.events = append(h.events, ev)
	h.headers = append(h.headers, r.Header.Clone())
}

// event returns the received event named name and its headers.
func (h *webhookSink) event(name string) (*monitor.WebhookEvent, http.Header) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := range h.events {
		if h.events[i].Event == name {
			return &h.events[i], h.headers[i]
		}
	}
	return nil, nil
}

// TestBisectionWebhooks: a bisection's end goes to the suite's regression
// webhook through the alert webhooks' outbox, signed and retried alike:
// the culprit (event bisection_culprit, both builds with their git shas
// and the git log range, the steps and device time) after one refused
// attempt, with the group's own alert_group delivery to the same URL
// beside it; a cancelled bisection of the same group is notified as
// bisection_cancelled with its reason. Real PostgreSQL, a real HTTP
// receiver, the monitor's delivery loop.
func TestBisectionWebhooks(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	sink := &webhookSink{secret: "s3cret", failures: 1}
	srv := httptest.NewServer(sink)
	t.Cleanup(srv.Close)
	if err := e.st.SetRegressPolicy(ctx, &store.RegressPolicy{Suite: "smoke", WebhookURL: srv.URL, WebhookSecret: sink.secret}); err != nil {
		t.Fatal(err)
	}
	builds := []string{"wh-1", "wh-2", "wh-3"}
	buildstest.Register(t, e.st, builds...)
	for i, b := range builds {
		if _, err := e.st.Pool().Exec(ctx, `UPDATE builds SET git_sha = $2 WHERE id = $1`, b, fmt.Sprintf("%040x", 0xfe00+i)); err != nil {
			t.Fatal(err)
		}
	}
	bisectDevice(t, e.st, "wh-host")
	gid := seedAlert(t, e.st, builds, 2, 1, 2)
	mon, err := monitor.New(monitor.Config{Store: e.st, PollInterval: 20 * time.Millisecond, RetryBase: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := mon.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mon.Stop)

	var b Bisection
	if resp := e.api.Post(fmt.Sprintf("/v1/alerts/%d/bisect", gid), e.auth(), map[string]any{}); resp.Code != http.StatusCreated ||
		json.Unmarshal(resp.Body.Bytes(), &b) != nil {
		t.Fatalf("bisect: %d %s", resp.Code, resp.Body)
	}
	testenv.Eventually(t, time.Minute, 10*time.Millisecond, func() error {
		for bisectRun(t, e.st, "wh-host", func(build string) float64 {
			if build == "wh-3" {
				return 9
			}
			return 10
		}) != nil {
		}
		resp := e.api.Get(fmt.Sprintf("/v1/bisections/%d", b.ID))
		if err := json.Unmarshal(resp.Body.Bytes(), &b); err != nil {
			t.Fatal(err)
		}
		if b.State == "running" {
			return errors.New("bisection still running")
		}
		return nil
	})
	if b.State != "culprit" {
		t.Fatalf("bisection ended %s (%s), want culprit", b.State, b.Reason)
	}
	var ev *monitor.WebhookEvent
	var hdr http.Header
	testenv.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		if ev, hdr = sink.event("bisection_culprit"); ev == nil {
			return errors.New("no bisection_culprit event yet")
		}
		if g, _ := sink.event("alert_group"); g == nil {
			return errors.New("no alert_group event yet")
		}
		return nil
	})
	n := ev.Bisection
	if n == nil || n.ID != b.ID || ev.Group == nil || ev.Group.ID != gid || n.State != "culprit" || n.FirstBadBuild != "wh-3" || n.LastGoodBuild != "wh-2" ||
		n.FirstBadSHA != fmt.Sprintf("%040x", 0xfe02) || n.GitLog != fmt.Sprintf("git log %040x..%040x", 0xfe01, 0xfe02) ||
		n.Steps < 1 || n.Runs < 2 || n.DeviceSeconds <= 0 || n.DeviceSeconds > n.BudgetSeconds || n.Config != bisectConfig || n.Metric != "decode_tps" {
		t.Fatalf("culprit event %+v (group %+v)", n, ev.Group)
	}
	if hdr.Get(monitor.HeaderEvent) != "bisection_culprit" || hdr.Get(monitor.HeaderDelivery) == "" {
		t.Fatalf("culprit headers %v", hdr)
	}
	// The receiver has the events before the sender records them
	// delivered: wait for the records.
	var status, group map[string][3]string
	testenv.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		var err error
		if status, err = e.st.BisectionWebhookStatus(ctx, b.ID); err != nil || status[srv.URL][0] != "delivered" {
			return fmt.Errorf("bisection delivery status %v, %v", status, err)
		}
		if group, err = e.st.WebhookDeliveryStatus(ctx, gid); err != nil || group[srv.URL][0] != "delivered" {
			return fmt.Errorf("group delivery status %v, %v", group, err)
		}
		return nil
	})
	if status[srv.URL][1] == "1" && group[srv.URL][1] == "1" {
		t.Fatalf("no delivery was retried after the refused first request: %v %v", status, group)
	}

	// A second bisection of the group, cancelled: notified with its state
	// and reason.
	var b2 Bisection
	if resp := e.api.Post(fmt.Sprintf("/v1/alerts/%d/bisect", gid), e.auth(), map[string]any{}); resp.Code != http.StatusCreated ||
		json.Unmarshal(resp.Body.Bytes(), &b2) != nil {
		t.Fatalf("bisect again: %d %s", resp.Code, resp.Body)
	}
	if resp := e.api.Post(fmt.Sprintf("/v1/bisections/%d/cancel", b2.ID), e.auth(), map[string]any{"reason": "known change"}); resp.Code != http.StatusOK {
		t.Fatalf("cancel: %d %s", resp.Code, resp.Body)
	}
	testenv.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		if ev, _ = sink.event("bisection_cancelled"); ev == nil {
			return errors.New("no bisection_cancelled event yet")
		}
		return nil
	})
	if ev.Bisection.ID != b2.ID || ev.Bisection.State != "cancelled" || ev.Bisection.Reason != "cancelled: known change" || ev.Bisection.GitLog != "" {
		t.Fatalf("cancelled event %+v", ev.Bisection)
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if sink.badSig != 0 || sink.requests != 4 {
		t.Fatalf("%d requests, %d with a bad signature; want 4 (one refused, three delivered), all signed", sink.requests, sink.badSig)
	}
}
