package cli_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/internal/cli"
	"github.com/lesfarm/lesfarm/internal/pglocal"
	"github.com/lesfarm/lesfarm/internal/testenv"
)

// syncBuffer is a bytes.Buffer safe for the command's and the test's
// goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// waitServing waits until serve's stdout matches re (it prints its
// addresses once it serves) and returns the match; it fails at once when
// serve returns first (done) and after total otherwise.
func waitServing(t *testing.T, total time.Duration, re *regexp.Regexp, out, errOut fmt.Stringer, done <-chan error) []string {
	t.Helper()
	var m []string
	testenv.Eventually(t, total, 20*time.Millisecond, func() error {
		select {
		case err := <-done:
			t.Fatalf("serve exited early: %v\nstdout:\n%s\nstderr:\n%s", err, out, errOut)
		default:
		}
		if m = re.FindStringSubmatch(out.String()); m == nil {
			return fmt.Errorf("serve printed no address yet\nstderr:\n%s", errOut)
		}
		return nil
	})
	return m
}

// TestServeStartsServesAndShutsDown runs `lesfarm serve` with no URLs
// (embedded NATS, local PostgreSQL), checks the API answers, then cancels
// the command's context as SIGINT would and expects a clean exit with the
// local PostgreSQL stopped.
func TestServeStartsServesAndShutsDown(t *testing.T) {
	if testing.Short() {
		t.Skip("serve end-to-end skipped in -short mode")
	}
	if _, err := pglocal.FindBinDir(os.Getenv("PATH")); err != nil {
		t.Fatalf("serve needs PostgreSQL binaries: %v", err)
	}
	base, err := os.MkdirTemp("", "lesfarm-serve-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil { // reachable by the postgres user when root
		t.Fatal(err)
	}
	dataDir := filepath.Join(base, "farm")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut syncBuffer
	root := cli.NewRoot(&cli.Env{Ctx: ctx, Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errOut})
	root.SetArgs([]string{"serve", "--data-dir", dataDir, "--http-addr", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0", "--database-url", ""})
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()

	base0 := waitServing(t, 90*time.Second, regexp.MustCompile(`http: (http://127\.0\.0\.1:\d+)`), &out, &errOut, done)[1]
	get := func(path string) string {
		t.Helper()
		resp, err := http.Get(base0 + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, resp.StatusCode, body)
		}
		return string(body)
	}
	if body := get("/readyz"); !strings.Contains(body, "ready") {
		t.Fatalf("/readyz: %s", body)
	}
	if body := get("/v1/suites"); !strings.Contains(body, `"smoke"`) || !strings.Contains(body, `"les-ladder"`) {
		t.Fatalf("built-in suites missing: %.300s", body)
	}
	if body := get("/metrics"); !strings.Contains(body, `lesfarm_runs{state="queued"}`) || !strings.Contains(body, "lesfarm_ingest_lag_messages") {
		t.Fatalf("coordinator metrics missing")
	}

	cancel() // what SIGINT/SIGTERM do through env.Ctx
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve returned %v\nstderr:\n%s", err, errOut.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatal("serve did not shut down within 60s")
	}
	if !strings.Contains(errOut.String(), "coordinator: stopped") {
		t.Fatalf("no shutdown log:\n%s", errOut.String())
	}
	if _, err := os.Stat(filepath.Join(dataDir, "pg", "postmaster.pid")); !os.IsNotExist(err) {
		t.Fatalf("local PostgreSQL still running after shutdown (postmaster.pid: %v)", err)
	}
}
