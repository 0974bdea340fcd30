package cli_test

import (
	"bytes"
	"context"
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

	re := regexp.MustCompile(`http: (http://127\.0\.0\.1:\d+)`)
	var base0 string
	for deadline := time.Now().Add(90 * time.Second); base0 == ""; {
		if m := re.FindStringSubmatch(out.String()); m != nil {
			base0 = m[1]
			break
		}
		select {
		case err := <-done:
			t.Fatalf("serve exited early: %v\nstderr:\n%s", err, errOut.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not start\nstderr:\n%s", errOut.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
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
