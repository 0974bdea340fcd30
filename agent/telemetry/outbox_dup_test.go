package telemetry

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lesfarm/lesfarm/internal/testenv"
	"github.com/lesfarm/lesfarm/protocol"
)

// TestOutboxDuplicateOnFirstPublish has another publisher store junk under
// the message ids a victim's records will use, on its own subject, before
// the victim publishes (issue 29, finding 1). JetStream acknowledges the
// victim's first publishes as duplicates and drops them; the Outbox must
// not take that for success: it counts each one and sends the record again
// under a fresh id, so every record reaches the stream. A record marked
// Resend (replayed after a restart) whose own copy is stored is not sent
// twice.
func TestOutboxDuplicateOnFirstPublish(t *testing.T) {
	ns := testenv.NATS(t)
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	js, _ := jetstream.New(nc)
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "TELEMETRY", Subjects: []string{"lesfarm.v1.telemetry.>"}, Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	const n, taken = 20, 8
	nonce := protocol.NewMsgNonce()
	victim, hostile := protocol.DeviceTelemetrySubject("victim", 7), protocol.DeviceTelemetrySubject("hostile", 7)
	id := func(i int) string { return protocol.TelemetryMsgID("victim", 7, 3, uint64(i), nonce) }
	for i := range taken {
		if _, err := js.Publish(ctx, hostile, []byte("junk"), jetstream.WithMsgID(id(i))); err != nil {
			t.Fatal(err)
		}
	}
	// A result the previous process stored before it died.
	resend := Record{Subject: protocol.DeviceTelemetrySubject("victim", 8), MsgID: protocol.ResultMsgID("victim", 8, 3, nonce), Data: []byte("r"), Resend: true}
	if _, err := js.Publish(ctx, resend.Subject, resend.Data, jetstream.WithMsgID(resend.MsgID)); err != nil {
		t.Fatal(err)
	}

	buf, _ := OpenBuffer(t.TempDir(), 1<<20)
	pub, _ := NewJetStreamPublisher(nc)
	ob, err := NewOutbox(OutboxConfig{Buffer: buf, Publisher: pub, RetryEvery: 10 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { ob.Run(runCtx); close(done) }()
	for i := range n {
		ob.Send(Record{Subject: victim, MsgID: id(i), Data: fmt.Appendf(nil, `{"seq":%d}`, i)})
	}
	ob.Send(resend)
	if err := ob.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	stop()
	<-done

	if got := ob.Duplicates(); got != taken {
		t.Errorf("Duplicates() = %d, want %d (one per id the other publisher took)", got, taken)
	}
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter("lesfarm.v1.telemetry.>"))
	if err != nil {
		t.Fatal(err)
	}
	if got := info.State.Subjects[victim]; got != n {
		t.Errorf("the stream holds %d of the victim's %d records", got, n)
	}
	if got := info.State.Subjects[resend.Subject]; got != 1 {
		t.Errorf("the replayed record is stored %d times, want once", got)
	}
}
