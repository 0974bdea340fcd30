package api

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestEventsTooManyIDsIs4xx: a run-events request following 20,000 runs
// is refused with a 4xx problem before any stream starts, not a 200 with
// an error event (issue 29, finding 12).
func TestEventsTooManyIDsIs4xx(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var q strings.Builder
	for i := 1; i <= 20_000; i++ {
		fmt.Fprintf(&q, "&run=%d", i)
	}
	resp := e.do("GET", "/v1/runs/events?"+q.String()[1:], nil)
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode < 400 || resp.StatusCode >= 500 {
		t.Fatalf("20,000 ids: %d %.200s, want 4xx", resp.StatusCode, body)
	}
	if ct := resp.Header.Get("Content-Type"); strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("20,000 ids answered with a stream (%s)", ct)
	}
	if resp := e.do("GET", "/v1/runs/events", nil); resp.StatusCode != http.StatusUnprocessableEntity {
		t.Fatalf("no trigger and no run: %d, want 422", resp.StatusCode)
	}
}

// TestAnonymousStreamsBounded: streams without an API token are bounded
// in number (503 with Retry-After past Deps.MaxAnonymousStreams); a
// request with a token is not counted (issue 29, finding 12).
func TestAnonymousStreamsBounded(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(d *Deps) { d.MaxAnonymousStreams = 1 })
	resp := e.do("POST", "/v1/runs", strings.NewReader(`{"suite":"smoke"}`), e.authHeader()...)
	var set struct {
		Runs []struct {
			ID int64 `json:"id"`
		} `json:"runs"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&set); err != nil || len(set.Runs) == 0 {
		t.Fatalf("trigger: %v", err)
	}
	path := fmt.Sprintf("/v1/runs/events?run=%d", set.Runs[0].ID)
	first := e.do("GET", path, nil) // held open: the run never ends here
	if first.StatusCode != http.StatusOK {
		t.Fatalf("first anonymous stream: %d", first.StatusCode)
	}
	second := e.do("GET", path, nil)
	if second.StatusCode != http.StatusServiceUnavailable || second.Header.Get("Retry-After") == "" {
		t.Fatalf("second anonymous stream: %d, want 503 with Retry-After", second.StatusCode)
	}
	withToken := e.do("GET", path, nil, "Authorization", "Bearer "+e.token)
	if withToken.StatusCode != http.StatusOK {
		t.Fatalf("stream with a token: %d, want 200", withToken.StatusCode)
	}
}
