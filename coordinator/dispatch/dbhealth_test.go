package dispatch

import (
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestDBHealthGrace: failover waits a full grace after start and after the
// database comes back; errors that are not unavailability do not count.
func TestDBHealthGrace(t *testing.T) {
	now := time.Unix(1000, 0)
	h := newDBHealth(func() time.Time { return now })
	grace := 10 * time.Second
	down := &pgconn.ConnectError{}
	steps := []struct {
		advance time.Duration
		err     error
		observe bool
		want    bool
	}{
		{advance: 0, want: false},               // just started
		{advance: 9 * time.Second, want: false}, // still inside the grace
		{advance: time.Second, want: true},      // a TTL of answers
		{advance: 0, err: down, observe: true, want: false},
		{advance: time.Minute, err: down, observe: true, want: false}, // still down
		{advance: time.Second, observe: true, want: false},            // back: grace starts
		{advance: 5 * time.Second, err: errors.New("duplicate key"), observe: true, want: false},
		{advance: 5 * time.Second, want: true},
	}
	for i, s := range steps {
		now = now.Add(s.advance)
		if s.observe {
			h.observe(s.err)
		}
		if got := h.settled(grace); got != s.want {
			t.Fatalf("step %d: settled %v, want %v", i, got, s.want)
		}
	}
}
