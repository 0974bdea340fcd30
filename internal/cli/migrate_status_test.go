package cli_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/lesfarm/lesfarm/internal/testenv"
	"github.com/lesfarm/lesfarm/migrations"
)

// TestMigrateStatusSaysDatabaseAhead: migrate status on a database a newer
// lesfarm migrated lists the migrations, says the database is ahead with
// both versions, and exits 1 (issue 29, finding 6); on a current database
// it exits 0 without the line.
func TestMigrateStatusSaysDatabaseAhead(t *testing.T) {
	ctx := context.Background()
	url := testenv.MigratedPostgresURL(t)
	code, out, errOut := run(t, "migrate", "status", "--database-url", url)
	if code != 0 || strings.Contains(out, "ahead") {
		t.Fatalf("current database: exit %d\n%s%s", code, out, errOut)
	}
	m, err := migrations.New(url)
	if err != nil {
		t.Fatal(err)
	}
	newest := m.Newest()
	m.Close()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `INSERT INTO goose_db_version (version_id, is_applied) VALUES ($1, true)`, newest+1); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = run(t, "migrate", "status", "--database-url", url)
	want := fmt.Sprintf("database ahead of this binary: schema version %05d, newest migration here %05d", newest+1, newest)
	if code != 1 || !strings.Contains(out, want) || !strings.Contains(out, "VERSION") {
		t.Fatalf("database ahead: exit %d, want 1 and %q\nstdout:\n%s\nstderr:\n%s", code, want, out, errOut)
	}
}
