package migrations_test

import (
	"context"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/lesfarm/lesfarm/internal/testenv"
	"github.com/lesfarm/lesfarm/migrations"
)

func TestMain(m *testing.M) { os.Exit(testenv.Run(m)) }

// sampleDump is every sample of the database in the per-sample row shape,
// ordered by key, as text (the samples table before 00030, the view
// after).
const sampleDump = `SELECT string_agg(concat_ws(',', run_id, seq, idx, config_index, repetition, step, phase, pos, tokens, duration_ns, stall_ns,
	bytes_read, cache_bytes, hits_total, misses_total, prefetch_used_total, prefetch_wasted_total, coalesce(encode(layers, 'hex'), 'NULL')),
	';' ORDER BY run_id, seq, idx) FROM samples`

// TestSampleBatchesMigration moves per-sample rows (with and without
// per-layer detail, several messages and runs) into sample_batches and
// back: the samples view shows exactly the rows the table held, counts come
// from n, and the down migration restores the rows.
func TestSampleBatchesMigration(t *testing.T) {
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
	downTo(ctx, t, m, 29)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `INSERT INTO samples SELECT r, q, i, i % 3, i % 2 - 1, 100 * q + i, 1 + i % 3, 16 + i, 1, 48000000 + i,
		11000000, 9437184 * r, 1073741824, 10 + i, i, 2, 1, CASE WHEN i = 1 THEN NULL ELSE decode(repeat(lpad(to_hex(i), 2, '0') || '00', 8), 'hex') END
		FROM generate_series(1, 3) r, generate_series(0, 4) q, generate_series(0, 6) i`); err != nil {
		t.Fatal(err)
	}
	var before string
	if err := conn.QueryRow(ctx, sampleDump).Scan(&before); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
	var after string
	var batches, samples int64
	if err := conn.QueryRow(ctx, sampleDump).Scan(&after); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, `SELECT count(*), sum(n) FROM sample_batches`).Scan(&batches, &samples); err != nil {
		t.Fatal(err)
	}
	if after != before || batches != 15 || samples != 105 {
		t.Fatalf("after up: %d batches, %d samples (want 15, 105); rows equal: %v", batches, samples, after == before)
	}
	downTo(ctx, t, m, 29)
	var down string
	if err := conn.QueryRow(ctx, sampleDump).Scan(&down); err != nil {
		t.Fatal(err)
	}
	if down != before {
		t.Fatal("the down migration did not restore the rows")
	}
}

// downTo rolls migrations back until version is the latest applied.
func downTo(ctx context.Context, t *testing.T, m *migrations.Migrator, version int64) {
	t.Helper()
	for {
		st, err := m.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var latest int64
		for _, s := range st {
			if s.Applied {
				latest = max(latest, s.Version)
			}
		}
		if latest <= version {
			return
		}
		if ok, err := m.Down(ctx); err != nil || !ok {
			t.Fatalf("down from %d: %v %v", latest, ok, err)
		}
	}
}
