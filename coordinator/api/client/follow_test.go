package client

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// TestFollowTriggerSurvivesOutage: the coordinator is away for longer
// than a handful of reconnects (a restart: connections dropped, then 503
// while its database comes back); FollowTrigger keeps reconnecting within
// FollowOutage and returns the done event. A 404 ends it at once, and an
// outage longer than FollowOutage gives up.
func TestFollowTriggerSurvivesOutage(t *testing.T) {
	const outage = 12 // failed requests before the coordinator is back
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1)
		switch {
		case r.URL.Query().Get("trigger") == "404":
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `{"status":404,"title":"Not Found","detail":"trigger not found"}`)
		case n <= outage/2:
			// Process gone: the connection drops without an answer.
			hj, _ := w.(http.Hijacker)
			c, _, _ := hj.Hijack()
			c.Close()
		case n <= outage:
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, `{"status":503,"title":"Service Unavailable","detail":"database unavailable"}`)
		default:
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "event: run\ndata: {\"run_id\":1,\"state\":\"succeeded\"}\n\nevent: done\ndata: {\"runs\":1,\"states\":{\"succeeded\":1},\"succeeded\":true}\n\n")
		}
	}))
	t.Cleanup(srv.Close)
	c, err := New(srv.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	c.RetryMin, c.RetryMax = 5*time.Millisecond, 20*time.Millisecond // Retry-After is capped at RetryMax
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var events int
	done, err := c.FollowTrigger(ctx, 7, func(RunEvent) { events++ })
	if err != nil || done == nil || !done.Succeeded || events != 1 {
		t.Fatalf("FollowTrigger = %+v, %v (events %d), want the done event after the outage", done, err, events)
	}
	if got := calls.Load(); got != outage+1 {
		t.Fatalf("%d requests, want %d", got, outage+1)
	}

	calls.Store(0)
	if _, err := c.FollowTrigger(ctx, 404, nil); err == nil || calls.Load() != 1 {
		t.Fatalf("unknown trigger: err %v after %d requests, want a 404 at once", err, calls.Load())
	}

	calls.Store(0)
	c.FollowOutage = 50 * time.Millisecond
	if _, err := c.FollowTrigger(ctx, 7, nil); err == nil {
		t.Fatal("an outage longer than FollowOutage did not give up")
	}
}

// TestReadsRetryThroughOutage: with ReadOutage set (lesfarm run --wait),
// GetRun, ListRuns and AlertsForBuild ride out a restart (dropped
// connections, then 503) like FollowTrigger; without it they fail at once,
// and a 404 is final either way.
func TestReadsRetryThroughOutage(t *testing.T) {
	const outage = 6
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1)
		switch {
		case r.URL.Path == "/v1/runs/404":
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `{"status":404,"title":"Not Found","detail":"run not found"}`)
		case n <= outage/2:
			hj, _ := w.(http.Hijacker)
			c, _, _ := hj.Hijack()
			c.Close()
		case n <= outage:
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, `{"status":503,"title":"Service Unavailable","detail":"database unavailable"}`)
		case r.URL.Path == "/v1/runs/7":
			fmt.Fprint(w, `{"id":7,"state":"succeeded","results":[{}]}`)
		default:
			fmt.Fprint(w, `{"items":[{"id":7}]}`)
		}
	}))
	t.Cleanup(srv.Close)
	c, err := New(srv.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	c.RetryMin, c.RetryMax = 5*time.Millisecond, 20*time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.GetRun(ctx, 7); err == nil {
		t.Fatal("GetRun without ReadOutage retried through the outage")
	}
	c.ReadOutage = 10 * time.Second
	for name, read := range map[string]func() (int, error){
		"GetRun": func() (int, error) { d, err := c.GetRun(ctx, 7); return len(d.Results), err },
		"ListRuns": func() (int, error) {
			rs, err := c.ListRuns(ctx, RunFilter{Suite: "smoke"})
			return len(rs), err
		},
		"AlertsForBuild": func() (int, error) {
			gs, err := c.AlertsForBuild(ctx, "smoke", "b1")
			return len(gs), err
		},
	} {
		calls.Store(0)
		if n, err := read(); err != nil || n != 1 || calls.Load() != outage+1 {
			t.Errorf("%s = %d items, %v after %d requests; want 1 item after %d", name, n, err, calls.Load(), outage+1)
		}
	}
	calls.Store(0)
	if _, err := c.GetRun(ctx, 404); err == nil || calls.Load() != 1 {
		t.Fatalf("unknown run: err %v after %d requests, want a 404 at once", err, calls.Load())
	}
}
