package pglocal_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lesfarm/lesfarm/internal/pglocal"
	"github.com/lesfarm/lesfarm/internal/testenv"
)

// startFast starts a throwaway cluster for a supervision test.
func startFast(t *testing.T, ctx context.Context) *pglocal.Server {
	t.Helper()
	if _, err := pglocal.FindBinDir(os.Getenv("PATH")); err != nil {
		t.Fatalf("PostgreSQL binaries are required for this test: %v", err)
	}
	base, err := os.MkdirTemp("", "pglocal-sup-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	srv, err := pglocal.Start(ctx, pglocal.Config{DataDir: filepath.Join(base, "pg"), Fast: true})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	return srv
}

// waitUntil waits until cond holds (testenv.Eventually, every 50ms),
// failing after d.
func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, d, 50*time.Millisecond, func() error {
		if !cond() {
			return fmt.Errorf("waiting for %s", what)
		}
		return nil
	})
}

// answers reports whether srv accepts a connection.
func answers(ctx context.Context, srv *pglocal.Server) bool {
	c, err := pgx.Connect(ctx, srv.URL())
	if err != nil {
		return false
	}
	c.Close(ctx)
	return true
}

// TestSuperviseRestartsKilledPostmaster: a SIGKILLed postmaster is
// restarted by the supervisor and a committed row survives the crash.
func TestSuperviseRestartsKilledPostmaster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv := startFast(t, ctx)
	failed := srv.Supervise(ctx, pglocal.SuperviseConfig{MinBackoff: 50 * time.Millisecond})
	conn, err := pgx.Connect(ctx, srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `SET synchronous_commit = on; CREATE TABLE kv (v int); INSERT INTO kv VALUES (42)`); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	pid := srv.PID()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, time.Minute, "the postmaster restarted", func() bool { return srv.Starts() == 2 && srv.PID() != pid })
	var v int
	waitUntil(t, 30*time.Second, "the committed row read back", func() bool {
		c, err := pgx.Connect(ctx, srv.URL())
		if err != nil {
			return false
		}
		defer c.Close(ctx)
		return c.QueryRow(ctx, `SELECT v FROM kv`).Scan(&v) == nil && v == 42
	})
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	select {
	case err, ok := <-failed:
		if ok {
			t.Fatalf("supervision reported %v after a clean Stop", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("supervision did not end after Stop")
	}
}

// TestSuperviseGivesUp: a postmaster that keeps dying soon after each
// start exhausts MaxFailures, and the supervisor reports it.
func TestSuperviseGivesUp(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv := startFast(t, ctx)
	failed := srv.Supervise(ctx, pglocal.SuperviseConfig{MinBackoff: 50 * time.Millisecond, MaxFailures: 1, StableAfter: time.Hour})
	pid := srv.PID()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, time.Minute, "the first restart answers", func() bool { return srv.Starts() == 2 && answers(ctx, srv) })
	if err := syscall.Kill(srv.PID(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-failed:
		if err == nil {
			t.Fatal("supervision ended without an error after a second crash within StableAfter")
		}
		t.Logf("gave up: %v", err)
	case <-ctx.Done():
		t.Fatal("supervision did not give up")
	}
	if n := srv.Starts(); n != 2 {
		t.Fatalf("%d starts, want 2 (no restart after giving up)", n)
	}
}

// TestSuperviseKillsLeftoverBackends: a backend of the killed postmaster
// that cannot exit by itself (stopped here, as a backend starved on a
// loaded machine is slow to) holds the old shared memory; the supervisor
// kills it before the restart instead of failing on "pre-existing shared
// memory block is still in use" and giving up.
func TestSuperviseKillsLeftoverBackends(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv := startFast(t, ctx)
	failed := srv.Supervise(ctx, pglocal.SuperviseConfig{MinBackoff: 50 * time.Millisecond, MaxFailures: 1, StableAfter: time.Hour})
	conn, err := pgx.Connect(ctx, srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	var backend int
	if err := conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&backend); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(backend, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(srv.PID(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, time.Minute, "the restarted postmaster answers", func() bool {
		select {
		case err := <-failed:
			t.Fatalf("supervision gave up: %v", err)
		default:
		}
		return srv.Starts() == 2 && answers(ctx, srv)
	})
	if err := syscall.Kill(backend, 0); !errors.Is(err, syscall.ESRCH) {
		if b, rerr := os.ReadFile("/proc/" + strconv.Itoa(backend) + "/stat"); rerr == nil && !strings.Contains(string(b), ") Z ") {
			t.Fatalf("the stopped backend %d is still there: %s", backend, b)
		}
	}
}
