package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lesfarm/lesfarm/internal/testenv"
)

// TestOutboxSurvivesNATSRestart publishes numbered records while the NATS
// server goes away and comes back on the same port and store: every record
// reaches the stream exactly once, with no gap in the sequence.
func TestOutboxSurvivesNATSRestart(t *testing.T) {
	storeDir := t.TempDir()
	srv, err := testenv.StartNATS(storeDir, -1)
	if err != nil {
		t.Fatal(err)
	}
	port := srv.Addr().(*net.TCPAddr).Port
	url := srv.ClientURL()
	t.Cleanup(func() { srv.Shutdown() })

	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond), nats.ReconnectJitter(10*time.Millisecond, 10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	js, _ := jetstream.New(nc)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "TELEMETRY", Subjects: []string{"lesfarm.v1.telemetry.>"}, Storage: jetstream.FileStorage, Duplicates: 10 * time.Minute}); err != nil {
		t.Fatal(err)
	}

	buf, _ := OpenBuffer(t.TempDir(), 1<<20)
	pub, _ := NewJetStreamPublisher(nc)
	ob, err := NewOutbox(OutboxConfig{Buffer: buf, Publisher: pub, PublishTimeout: 500 * time.Millisecond, RetryEvery: 20 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stopRun := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { ob.Run(runCtx); close(done) }()
	nc.SetReconnectHandler(func(*nats.Conn) { ob.Reconnected() })

	const n = 300
	send := func(i int) {
		ob.Send(Record{Subject: "lesfarm.v1.telemetry.7", MsgID: "t/7/" + strconv.Itoa(i), Data: fmt.Appendf(nil, `{"seq":%d}`, i)})
	}
	for i := range 100 {
		send(i)
	}
	srv.Shutdown()
	srv.WaitForShutdown()
	for i := 100; i < 200; i++ {
		send(i)
	}
	// Once the pending publish times out, records spill to disk.
	testenv.Eventually(t, 5*time.Second, 10*time.Millisecond, func() error {
		if buf.Len() == 0 {
			return errors.New("nothing was buffered on disk while NATS was down")
		}
		return nil
	})
	srv, err = testenv.StartNATS(storeDir, port)
	if err != nil {
		t.Fatal(err)
	}
	for i := 200; i < n; i++ {
		send(i)
	}
	if err := ob.Flush(ctx); err != nil {
		t.Fatalf("flush: %v (buffer holds %d)", err, buf.Len())
	}
	stopRun()
	<-done
	published, spilled := ob.Stats()
	t.Logf("published %d, went through disk %d", published, spilled)

	cons, err := js.CreateOrUpdateConsumer(ctx, "TELEMETRY", jetstream.ConsumerConfig{AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	total := 0
	for total < n {
		batch, err := cons.Fetch(100, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		for m := range batch.Messages() {
			seen[m.Headers().Get(nats.MsgIdHdr)]++
			m.Ack()
			got++
		}
		if got == 0 {
			break
		}
		total += got
	}
	for i := range n {
		if c := seen["t/7/"+strconv.Itoa(i)]; c != 1 {
			t.Errorf("record %d stored %d times", i, c)
		}
	}
	if total != n {
		t.Errorf("stream holds %d messages, want %d", total, n)
	}
}
