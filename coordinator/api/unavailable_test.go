package api

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lesfarm/lesfarm/coordinator/store"
)

// downStore is a store whose database does not exist: every query fails
// to connect, as while Postgres is stopped.
func downStore(t *testing.T) *store.Store {
	t.Helper()
	dir := t.TempDir()
	pool, err := pgxpool.New(context.Background(), "host="+dir+" port=1 user=nobody dbname=none connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	st := store.New(pool)
	t.Cleanup(st.Close)
	return st
}

// TestDatabaseDownIs503: while the database is down every endpoint that
// needs it answers 503 with Retry-After — not 404 (which made `lesfarm run
// --wait` give up on a run that then succeeded) and not 500.
func TestDatabaseDownIs503(t *testing.T) {
	t.Parallel()
	h, _, err := New(Deps{Store: downStore(t), Logger: slog.New(slog.DiscardHandler), WaitPoll: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	tests := []struct{ method, path, body string }{
		{"GET", "/v1/runs/5", ""},
		{"GET", "/v1/runs", ""},
		{"GET", "/v1/runs/events?trigger=5", ""},
		{"GET", "/v1/results?run=5", ""},
		{"GET", "/v1/devices", ""},
		{"GET", "/readyz", ""},
		{"POST", "/v1/runs", `{"suite":"smoke","build":"b"}`},
	}
	for _, tc := range tests {
		req, _ := http.NewRequest(tc.method, srv.URL+tc.path, strings.NewReader(tc.body))
		req.Header.Set("Authorization", "Bearer lft_whatever")
		if tc.body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		start := time.Now()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
			t.Errorf("%s %s: %d Retry-After %q, want 503 with Retry-After", tc.method, tc.path, resp.StatusCode, resp.Header.Get("Retry-After"))
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%s %s took %v", tc.method, tc.path, d)
		}
	}
}

// TestEventsUnknownTriggerIs404: an unknown trigger is a plain 404 before
// the stream starts, not a 200 stream holding an error event.
func TestEventsUnknownTriggerIs404(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	resp := e.do("GET", "/v1/runs/events?trigger=999999", nil)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("events for an unknown trigger: %d, want 404", resp.StatusCode)
	}
}
