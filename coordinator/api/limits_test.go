package api

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lesfarm/lesfarm/coordinator/builds/buildstest"
	"github.com/lesfarm/lesfarm/coordinator/store"
)

// frozenStore is a store whose database accepts connections and never
// answers, like a Postgres stopped with SIGSTOP.
func frozenStore(t *testing.T) *store.Store {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	host, port, _ := net.SplitHostPort(ln.Addr().String())
	pc, err := pgxpool.ParseConfig("host=" + host + " port=" + port + " user=nobody dbname=none sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	pc.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		t.Fatal(err)
	}
	st := store.New(pool)
	t.Cleanup(st.Close)
	return st
}

// TestFrozenDatabaseBoundsAndShedsRequests: with the database frozen, 40
// concurrent reads neither hang nor pile up. At most MaxInFlight wait for
// the database, each until RequestTimeout, then get 503; the others are
// shed with 503 after QueueWait. Every answer carries Retry-After.
func TestFrozenDatabaseBoundsAndShedsRequests(t *testing.T) {
	t.Parallel()
	const timeout = 300 * time.Millisecond
	h, _, err := New(Deps{Store: frozenStore(t), Logger: slog.New(slog.DiscardHandler), RequestTimeout: timeout, MaxInFlight: 4, QueueWait: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	const n = 40
	type answer struct {
		code       int
		retryAfter string
		body       string
		took       time.Duration
	}
	answers := make(chan answer, n)
	cl := &http.Client{Timeout: 10 * time.Second}
	for range n {
		go func() {
			start := time.Now()
			resp, err := cl.Get(srv.URL + "/v1/runs/5")
			if err != nil {
				answers <- answer{code: -1, body: err.Error(), took: time.Since(start)}
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			answers <- answer{code: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After"), body: string(b), took: time.Since(start)}
		}()
	}
	shed, timedOut := 0, 0
	var slowest time.Duration
	for range n {
		a := <-answers
		if a.code != http.StatusServiceUnavailable || a.retryAfter == "" {
			t.Fatalf("answer %d (Retry-After %q) after %v: %s; want 503 with Retry-After", a.code, a.retryAfter, a.took, a.body)
		}
		switch {
		case strings.Contains(a.body, "overloaded"):
			shed++
		case strings.Contains(a.body, "database unavailable"):
			timedOut++
		}
		slowest = max(slowest, a.took)
	}
	// The 40 requests pass through 4 slots of 300 ms: a few waves get the
	// database's 503, the rest are shed.
	if shed == 0 || timedOut == 0 || shed+timedOut != n {
		t.Fatalf("%d shed and %d timed out of %d", shed, timedOut, n)
	}
	if slowest > 3*time.Second {
		t.Fatalf("slowest answer took %v with a %v request timeout", slowest, timeout)
	}
	t.Logf("%d timed out at the database (%v), %d shed; slowest answer %v", timedOut, timeout, shed, slowest)
}

// TestWaitOutlivesWriteTimeout: the server's write timeout cuts off slow
// ordinary responses, but a trigger with wait=true answers when its runs
// finish, however long after its request that is.
func TestWaitOutlivesWriteTimeout(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	created := make(chan struct{})
	var once sync.Once
	h, _, err := New(Deps{Store: e.st, Logger: slog.New(slog.DiscardHandler), WaitPoll: 50 * time.Millisecond,
		RunsCreated: func() { once.Do(func() { close(created) }) }})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Config.WriteTimeout = 200 * time.Millisecond
	srv.Start()
	t.Cleanup(srv.Close)
	buildstest.Register(t, e.st, "slow-wait")
	go func() {
		<-created
		// Finish the run well past the write timeout. No event marks the
		// server's write deadline passing: it is a clock, and outliving
		// it is what this test is about.
		time.Sleep(500 * time.Millisecond)
		runs, err := e.st.ListRuns(context.Background(), &store.ListRunsParams{Build: "slow-wait"})
		if err != nil || len(runs) != 1 {
			t.Errorf("runs %+v, %v: want the waited one", runs, err)
			return
		}
		_, _ = e.st.CancelRun(context.Background(), runs[0].ID, "test")
	}()
	req, _ := http.NewRequest("POST", srv.URL+"/v1/runs?wait=true&wait_timeout=20", strings.NewReader(`{"suite":"smoke","build":"slow-wait"}`))
	req.Header.Set("Authorization", "Bearer "+e.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("wait cut off: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || !strings.Contains(string(b), `"cancelled"`) {
		t.Fatalf("wait: %d %s", resp.StatusCode, b)
	}
}
