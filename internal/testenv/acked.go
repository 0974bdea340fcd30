package testenv

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// WaitAcked waits until every JetStream consumer on srv has nothing left
// to deliver and has acknowledged all it delivered (no acks pending, ack
// floor at the last delivered message). From then on nothing can be
// redelivered, so a count read afterwards is final: this is the event a
// test waits for instead of sleeping past AckWait. It fails the test
// after total.
func WaitAcked(t testing.TB, srv *server.Server, total time.Duration) {
	t.Helper()
	Eventually(t, total, 20*time.Millisecond, func() error { return unacked(srv) })
}

// unacked returns an error naming the first consumer on srv that still
// has messages to deliver or acknowledgements outstanding.
func unacked(srv *server.Server) error {
	info, err := srv.Jsz(&server.JSzOptions{Accounts: true, Streams: true, Consumer: true})
	if err != nil {
		return fmt.Errorf("jsz: %w", err)
	}
	for _, a := range info.AccountDetails {
		for _, s := range a.Streams {
			for _, c := range s.Consumer {
				if c.NumPending > 0 || c.NumAckPending > 0 || c.AckFloor.Stream < c.Delivered.Stream {
					return fmt.Errorf("consumer %s on %s: %d to deliver, %d unacknowledged (ack floor %d, delivered %d)",
						c.Name, s.Name, c.NumPending, c.NumAckPending, c.AckFloor.Stream, c.Delivered.Stream)
				}
			}
		}
	}
	return nil
}
