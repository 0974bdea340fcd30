package testenv

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestUnacked checks the event WaitAcked waits for: a consumer with
// messages undelivered or delivered but unacknowledged is reported, one
// that acknowledged everything is not.
func TestUnacked(t *testing.T) {
	t.Parallel()
	srv := NATS(t)
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}}); err != nil {
		t.Fatal(err)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, "T", jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	if err := unacked(srv); err != nil {
		t.Fatalf("empty stream: %v", err)
	}
	for range 2 {
		if _, err := js.Publish(ctx, "t.x", []byte("m")); err != nil {
			t.Fatal(err)
		}
	}
	if err := unacked(srv); err == nil {
		t.Fatal("two undelivered messages not reported")
	}
	batch, err := cons.Fetch(2, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var msgs []jetstream.Msg
	for m := range batch.Messages() {
		msgs = append(msgs, m)
	}
	if len(msgs) != 2 {
		t.Fatalf("fetched %d messages, want 2", len(msgs))
	}
	if err := msgs[0].DoubleAck(ctx); err != nil {
		t.Fatal(err)
	}
	if err := unacked(srv); err == nil {
		t.Fatal("a delivered, unacknowledged message not reported")
	}
	if err := msgs[1].DoubleAck(ctx); err != nil {
		t.Fatal(err)
	}
	WaitAcked(t, srv, 5*time.Second)
}
