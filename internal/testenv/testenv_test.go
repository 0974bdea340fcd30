package testenv_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lesfarm/lesfarm/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Run(m)) }

func TestPostgresDatabasesAreIsolated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b := testenv.PostgresURL(t), testenv.PostgresURL(t)
	if a == b {
		t.Fatal("two calls returned the same database")
	}
	ca, err := pgx.Connect(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	defer ca.Close(ctx)
	if _, err := ca.Exec(ctx, `CREATE TABLE only_in_a (x int)`); err != nil {
		t.Fatal(err)
	}
	cb, err := pgx.Connect(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	defer cb.Close(ctx)
	var n int
	if err := cb.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE tablename = 'only_in_a'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("table leaked across databases: n=%d err=%v", n, err)
	}
}

func TestMigratedPostgres(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testenv.MigratedPostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var id string
	if err := conn.QueryRow(ctx, `SELECT value FROM meta WHERE key = 'installation_id'`).Scan(&id); err != nil || id == "" {
		t.Fatalf("migrations not applied: id=%q err=%v", id, err)
	}
}

func TestNATSJetStreamPublishConsume(t *testing.T) {
	t.Parallel()
	s := testenv.NATS(t)
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := js.Publish(ctx, "t.x", []byte{byte('a' + i)}); err != nil {
			t.Fatal(err)
		}
	}
	cons, err := st.CreateConsumer(ctx, jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(3, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var got string
	for m := range batch.Messages() {
		got += string(m.Data())
		if err := m.Ack(); err != nil {
			t.Fatal(err)
		}
	}
	if got != "abc" {
		t.Fatalf("consumed %q, want abc", got)
	}
}
