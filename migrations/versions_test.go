package migrations_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/lesfarm/lesfarm/internal/testenv"
	"github.com/lesfarm/lesfarm/migrations"
)

// TestUpRefusesNewerSchema is issue 29, finding 6: a database that a newer
// lesfarm migrated past this binary's newest migration is refused by Up
// (which serve runs at startup) with both versions named, and nothing is
// applied; a database at or below the binary's version migrates.
func TestUpRefusesNewerSchema(t *testing.T) {
	ctx := context.Background()
	url := testenv.MigratedPostgresURL(t)
	m, err := migrations.New(url)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.CheckNotAhead(ctx); err != nil {
		t.Fatalf("a database at the binary's version: %v", err)
	}
	newest := m.Newest()
	if v, err := m.DBVersion(ctx); err != nil || v != newest {
		t.Fatalf("DBVersion = %d, %v; want the newest embedded %d", v, err, newest)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// What a newer binary leaves: a migration this one does not have.
	if _, err := conn.Exec(ctx, `INSERT INTO goose_db_version (version_id, is_applied) VALUES ($1, true)`, newest+1000); err != nil {
		t.Fatal(err)
	}
	err = migrations.Up(ctx, url)
	var ahead *migrations.SchemaAheadError
	if !errors.As(err, &ahead) || ahead.Database != newest+1000 || ahead.Binary != newest {
		t.Fatalf("Up on a newer schema: %v; want a SchemaAheadError naming %d and %d", err, newest+1000, newest)
	}
	for _, v := range []string{"newer than this binary", "version"} {
		if !strings.Contains(err.Error(), v) {
			t.Fatalf("error %q does not say %q", err, v)
		}
	}
	if n, err := m.Up(ctx); n != 0 || !errors.As(err, &ahead) {
		t.Fatalf("Migrator.Up on a newer schema: %d, %v", n, err)
	}
}
