package pglocal_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lesfarm/lesfarm/internal/pglocal"
)

func TestStartCreateReadStopReuse(t *testing.T) {
	if _, err := pglocal.FindBinDir(os.Getenv("PATH")); err != nil {
		t.Fatalf("PostgreSQL binaries are required for this test: %v", err)
	}
	base, err := os.MkdirTemp("", "pglocal-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	dataDir := filepath.Join(base, "pg")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	srv, err := pglocal.Start(ctx, pglocal.Config{DataDir: dataDir, Fast: true})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	conn, err := pgx.Connect(ctx, srv.URL())
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	if _, err := conn.Exec(ctx, `CREATE TABLE kv (k text PRIMARY KEY, v int); INSERT INTO kv VALUES ('answer', 42)`); err != nil {
		t.Fatalf("create/insert: %v", err)
	}
	var v int
	if err := conn.QueryRow(ctx, `SELECT v FROM kv WHERE k = 'answer'`).Scan(&v); err != nil || v != 42 {
		t.Fatalf("read back: v=%d err=%v", v, err)
	}
	conn.Close(ctx)
	if err := srv.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if _, err := pgx.Connect(ctx, srv.URL()); err == nil {
		t.Fatal("server still accepts connections after Stop")
	}

	// A second Start reuses the cluster: the table is still there.
	srv2, err := pglocal.Start(ctx, pglocal.Config{DataDir: dataDir, Fast: true})
	if err != nil {
		t.Fatalf("restart: %v", err)
	}
	defer srv2.Stop()
	conn, err = pgx.Connect(ctx, srv2.URL())
	if err != nil {
		t.Fatalf("reconnect: %v", err)
	}
	defer conn.Close(ctx)
	if err := conn.QueryRow(ctx, `SELECT v FROM kv WHERE k = 'answer'`).Scan(&v); err != nil || v != 42 {
		t.Fatalf("data not kept across restart: v=%d err=%v", v, err)
	}
}

func TestNoBinariesGivesInstallHint(t *testing.T) {
	empty := t.TempDir()
	t.Setenv("PATH", empty)
	_, err := pglocal.FindBinDir(empty)
	if err == nil {
		// Only reachable when /usr/lib/postgresql has binaries: check the
		// explicit BinDir path instead, which never searches.
		_, err = pglocal.Start(context.Background(), pglocal.Config{DataDir: t.TempDir(), BinDir: empty})
	}
	if !errors.Is(err, pglocal.ErrNoBinaries) {
		t.Fatalf("err = %v, want ErrNoBinaries", err)
	}
	for _, want := range []string{"apt-get install -y postgresql", "brew install postgresql@16"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks install hint %q", err, want)
		}
	}
}

func TestFindBinDirPrefersNewest(t *testing.T) {
	root := t.TempDir()
	mk := func(v string) string {
		dir := filepath.Join(root, "postgresql", v, "bin")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, n := range []string{"initdb", "postgres"} {
			if err := os.WriteFile(filepath.Join(dir, n), []byte("#!/bin/sh\n"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	old, newer := mk("13"), mk("17")
	got, err := pglocal.FindBinDir(old + string(os.PathListSeparator) + newer)
	if err != nil {
		t.Fatal(err)
	}
	if got != newer && !strings.Contains(got, "/usr/lib/postgresql/") {
		t.Fatalf("FindBinDir = %s, want %s", got, newer)
	}
}
