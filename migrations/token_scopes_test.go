package migrations_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/lesfarm/lesfarm/internal/testenv"
	"github.com/lesfarm/lesfarm/migrations"
)

// TestTokenScopesMigration: tokens created before 00062 keep every scope
// (nothing that worked stops working), live duplicate names are renamed
// "NAME #ID" except the newest, revoked ones keep theirs, and a second
// live token of one name is then refused by the index.
func TestTokenScopesMigration(t *testing.T) {
	ctx := context.Background()
	url := testenv.PostgresURL(t)
	m, err := migrations.New(url)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
	downTo(ctx, t, m, 61)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `INSERT INTO api_tokens (id, name, prefix, token_hash, revoked_at) VALUES
		(1, 'ci', 'lft_a', decode(repeat('01', 32), 'hex'), NULL),
		(2, 'ci', 'lft_b', decode(repeat('02', 32), 'hex'), NULL),
		(3, 'ci', 'lft_c', decode(repeat('03', 32), 'hex'), now()),
		(4, 'dash', 'lft_d', decode(repeat('04', 32), 'hex'), NULL)`); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
	want := map[int64]string{1: "ci #1", 2: "ci", 3: "ci", 4: "dash"}
	rows, err := conn.Query(ctx, `SELECT id, name, array_to_string(scopes, ',') FROM api_tokens ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id int64
		var name, scopes string
		if err := rows.Scan(&id, &name, &scopes); err != nil {
			t.Fatal(err)
		}
		if name != want[id] || scopes != "read,trigger,suites,builds,admin" {
			t.Errorf("token %d after 00062: name %q scopes %q, want %q with every scope", id, name, scopes, want[id])
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	_, err = conn.Exec(ctx, `INSERT INTO api_tokens (name, prefix, token_hash) VALUES ('dash', 'lft_e', decode(repeat('05', 32), 'hex'))`)
	if err == nil {
		t.Fatal("a second live token named dash was accepted")
	}
	if _, err := conn.Exec(ctx, `INSERT INTO api_tokens (name, prefix, token_hash, scopes) VALUES ('x', 'lft_f', decode(repeat('06', 32), 'hex'), '{root}')`); err == nil {
		t.Fatal("a token with an unknown scope was accepted")
	}
}
