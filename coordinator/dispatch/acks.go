package dispatch

import (
	"context"
	"sync"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/store"
)

// acker commits the agents' acknowledgements of their assignments in
// groups: while one statement is in flight, the acknowledgements arriving
// meanwhile wait and go together in the next (store.AckAssignmentsRenew).
// A burst of a thousand assignments was a thousand UPDATEs competing with
// the claims and results for the database; now it is a few.
type acker struct {
	st *store.Store

	mu      sync.Mutex
	pending []ackWait
	running bool
}

type ackWait struct {
	ack  store.AckRenew
	ttl  time.Duration
	done chan error // store.ErrStaleToken when not current
}

// ack acknowledges one assignment and renews its lease to ttl, returning
// when its group's statement did (ErrStaleToken when its lease is no
// longer current), or when ctx ends.
func (a *acker) ack(ctx context.Context, runID, token int64, ttl time.Duration) error {
	w := ackWait{ack: store.AckRenew{RunID: runID, Token: token}, ttl: ttl, done: make(chan error, 1)}
	a.mu.Lock()
	a.pending = append(a.pending, w)
	start := !a.running
	a.running = true
	a.mu.Unlock()
	if start {
		go a.flush()
	}
	select {
	case err := <-w.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ackTimeout bounds one group's statement.
const ackTimeout = 10 * time.Second

// flush commits the pending groups until none is left.
func (a *acker) flush() {
	for {
		a.mu.Lock()
		group := a.pending
		a.pending = nil
		if len(group) == 0 {
			a.running = false
			a.mu.Unlock()
			return
		}
		a.mu.Unlock()
		// One TTL per statement: group by it (in practice there is one).
		for len(group) > 0 {
			ttl := group[0].ttl
			var same, rest []ackWait
			for _, w := range group {
				if w.ttl == ttl {
					same = append(same, w)
				} else {
					rest = append(rest, w)
				}
			}
			a.commit(same, ttl)
			group = rest
		}
	}
}

func (a *acker) commit(group []ackWait, ttl time.Duration) {
	acks := make([]store.AckRenew, len(group))
	for i, w := range group {
		acks[i] = w.ack
	}
	ctx, cancel := context.WithTimeout(context.Background(), ackTimeout)
	acked, err := a.st.AckAssignmentsRenew(ctx, acks, ttl)
	cancel()
	for i, w := range group {
		switch {
		case err != nil:
			w.done <- err
		case !acked[i]:
			w.done <- store.ErrStaleToken
		default:
			w.done <- nil
		}
	}
}
