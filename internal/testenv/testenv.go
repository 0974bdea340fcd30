// Package testenv gives tests real infrastructure: a PostgreSQL database of
// their own and an in-process NATS server with JetStream. It is a harness
// package: production code never imports it.
//
// Postgres is chosen in this order:
//  1. TEST_DATABASE_URL (an admin URL to an existing server);
//  2. testcontainers-go, when a Docker engine answers;
//  3. a local cluster started from the machine's PostgreSQL binaries
//     (internal/pglocal) in a temp dir, shared by the tests of one package.
//
// Each call to PostgresURL creates a fresh database, dropped in t.Cleanup, so
// tests can run in parallel. Without any PostgreSQL the test fails (never
// skips) with the install hint.
//
// Packages that use Postgres should stop the shared cluster after their tests:
//
//	func TestMain(m *testing.M) { os.Exit(testenv.Run(m)) }
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats-server/v2/server"

	"github.com/lesfarm/lesfarm/internal/embedded"
	"github.com/lesfarm/lesfarm/internal/pglocal"
	"github.com/lesfarm/lesfarm/migrations"
)

var (
	pgOnce   sync.Once
	pgAdmin  string // admin URL of the chosen server
	pgErr    error
	pgStop   func()
	tmplOnce sync.Once
	tmplName string
	tmplErr  error
	createMu sync.Mutex // CREATE DATABASE ... TEMPLATE needs the template idle
)

// Run runs the tests of a package and then stops the Postgres server the
// harness started, if any. Use it from TestMain.
func Run(m *testing.M) int {
	code := m.Run()
	if pgStop != nil {
		pgStop()
	}
	return code
}

// adminURL returns the admin URL of the test server, starting it on first use.
func adminURL() (string, error) {
	pgOnce.Do(func() {
		if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
			pgAdmin = u
			return
		}
		if u, stop, err := startContainer(); err == nil {
			pgAdmin, pgStop = u, stop
			return
		}
		dir, err := os.MkdirTemp("", "lesfarm-pg-")
		if err != nil {
			pgErr = err
			return
		}
		// The postgres user must be able to reach the dir when we are root.
		_ = os.Chmod(dir, 0o755)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		srv, err := embedded.StartPostgres(ctx, pglocal.Config{
			DataDir: dir + "/data",
			Fast:    true,
			Logger:  slog.New(slog.DiscardHandler),
		})
		if err != nil {
			os.RemoveAll(dir)
			pgErr = err
			return
		}
		pgAdmin = srv.URL()
		pgStop = func() {
			_ = srv.Stop()
			os.RemoveAll(dir)
		}
	})
	return pgAdmin, pgErr
}

// PostgresURL returns the URL of a new, empty database on a real PostgreSQL
// server. The database is dropped when the test ends. It fails the test with
// an install hint when no PostgreSQL is available.
func PostgresURL(t testing.TB) string {
	t.Helper()
	return createDatabase(t, "")
}

// MigratedPostgresURL returns the URL of a new database with every migration
// in migrations/ applied.
func MigratedPostgresURL(t testing.TB) string {
	t.Helper()
	admin, err := adminURL()
	if err != nil {
		t.Fatalf("testenv: no PostgreSQL for tests: %v", err)
	}
	tmplOnce.Do(func() {
		tmplName = "lesfarm_tmpl_" + randomSuffix()
		if tmplErr = exec(admin, "CREATE DATABASE "+tmplName); tmplErr != nil {
			return
		}
		tmplErr = migrations.Up(context.Background(), withDatabase(admin, tmplName))
	})
	if tmplErr != nil {
		t.Fatalf("testenv: migrate template database: %v", tmplErr)
	}
	return createDatabase(t, tmplName)
}

func createDatabase(t testing.TB, template string) string {
	t.Helper()
	admin, err := adminURL()
	if err != nil {
		t.Fatalf("testenv: no PostgreSQL for tests: %v\n(set TEST_DATABASE_URL, start a Docker engine, or %s)", err, pglocal.InstallHint)
	}
	name := "lesfarm_t_" + randomSuffix()
	stmt := "CREATE DATABASE " + name
	if template != "" {
		stmt += " TEMPLATE " + template
		createMu.Lock()
		err = exec(admin, stmt)
		createMu.Unlock()
	} else {
		err = exec(admin, stmt)
	}
	if err != nil {
		t.Fatalf("testenv: %s: %v", stmt, err)
	}
	t.Cleanup(func() {
		if err := exec(admin, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Logf("testenv: drop %s: %v", name, err)
		}
	})
	return withDatabase(admin, name)
}

func exec(dsn, stmt string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, stmt)
	return err
}

// withDatabase returns dsn pointing at database name. It accepts URL and
// keyword/value DSNs.
func withDatabase(dsn, name string) string {
	if u, err := url.Parse(dsn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		u.Path = "/" + name
		return u.String()
	}
	var parts []string
	for _, f := range strings.Fields(dsn) {
		if !strings.HasPrefix(f, "dbname=") {
			parts = append(parts, f)
		}
	}
	return strings.Join(append(parts, "dbname="+name), " ")
}

func randomSuffix() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// NATS starts an in-process nats-server with JetStream on a random loopback
// port, storing streams in a temp dir, and shuts it down when the test ends.
func NATS(t testing.TB) *server.Server {
	t.Helper()
	s, err := StartNATS(t.TempDir(), -1)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	return s
}

// StartNATS starts an in-process nats-server with JetStream storing in dir
// on port (-1: random). Tests that restart a server on the same port and
// store use it directly; the caller shuts it down.
func StartNATS(dir string, port int) (*server.Server, error) {
	addr := "127.0.0.1:0"
	if port > 0 {
		addr = "127.0.0.1:" + strconv.Itoa(port)
	}
	return embedded.StartNATS(embedded.NATSConfig{Addr: addr, StoreDir: dir, ReadyTimeout: 10 * time.Second})
}
