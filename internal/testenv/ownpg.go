package testenv

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/internal/embedded"
	"github.com/lesfarm/lesfarm/internal/pglocal"
	"github.com/lesfarm/lesfarm/migrations"
)

// OwnPostgres is a PostgreSQL server of one test's own, with every
// migration applied, for fault tests that stop, restart or freeze the
// database (the shared test server must keep serving the other tests). It
// listens on a Unix socket only. Its methods fail the test on error.
type OwnPostgres struct {
	t   testing.TB
	cfg pglocal.Config
	srv *pglocal.Server
}

// NewOwnPostgres starts a private cluster (initdb takes about 2 s) and
// stops it when the test ends. It skips the test when the machine has no
// PostgreSQL server binaries (e.g. CI that provides TEST_DATABASE_URL only).
func NewOwnPostgres(t testing.TB) *OwnPostgres {
	t.Helper()
	if _, err := pglocal.FindBinDir(os.Getenv("PATH")); err != nil {
		if errors.Is(err, pglocal.ErrNoBinaries) {
			t.Skipf("SKIPPED: this fault test needs PostgreSQL server binaries to run a database of its own: %v", err)
		}
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "lesfarm-ownpg-")
	if err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(dir, 0o755) // the postgres user must reach it when we are root
	p := &OwnPostgres{t: t, cfg: pglocal.Config{DataDir: dir + "/data", Fast: true, Logger: slog.New(slog.DiscardHandler)}}
	t.Cleanup(func() {
		if p.srv != nil {
			_ = p.srv.SignalGroup(syscall.SIGCONT)
			_ = p.srv.Stop()
		}
		os.RemoveAll(dir)
	})
	p.Start()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := migrations.Up(ctx, p.URL()); err != nil {
		t.Fatalf("testenv: migrate own postgres: %v", err)
	}
	return p
}

// URL is the database URL; it stays the same across Stop and Start.
func (p *OwnPostgres) URL() string { return p.srv.URL() }

// Start starts the server (again, on the same data).
func (p *OwnPostgres) Start() {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := embedded.StartPostgres(ctx, p.cfg)
	if err != nil {
		p.t.Fatalf("testenv: start own postgres: %v", err)
	}
	p.srv = srv
}

// Stop shuts the server down (fast shutdown); connections fail at once.
func (p *OwnPostgres) Stop() {
	p.t.Helper()
	if err := p.srv.Stop(); err != nil {
		p.t.Fatalf("testenv: stop own postgres: %v", err)
	}
}

// Freeze stops every server process (SIGSTOP): connections hang, as with
// a stalled disk or a paused VM. Thaw resumes them.
func (p *OwnPostgres) Freeze() {
	p.t.Helper()
	if err := p.srv.SignalGroup(syscall.SIGSTOP); err != nil {
		p.t.Fatal(err)
	}
}

// Thaw resumes a frozen server.
func (p *OwnPostgres) Thaw() {
	p.t.Helper()
	if err := p.srv.SignalGroup(syscall.SIGCONT); err != nil {
		p.t.Fatal(err)
	}
}
