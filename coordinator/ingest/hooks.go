package ingest

import (
	"sync"
	"time"
)

// resultMaxAckPending bounds the results delivered and not yet
// acknowledged. A result is acknowledged after Reporter.Finished, and the
// hooks (regression detection: 150 ms–5 s per result on a loaded 2-core
// host) fall behind the results at 1,000 agents; with the old bound of 256
// the consumer then stopped delivering, and every result, the commit that
// frees its device included, waited behind the hooks of the ones before
// (12 s at 1,000 agents, longer than a lease). Results are small, so the
// bound is the backlog the hooks may build, not a memory limit.
const resultMaxAckPending = 16384

// hookQueue holds committed results waiting for Reporter.Finished and
// acknowledgement, in commit order. push never blocks, so a result worker
// goes on to the next result however far the hooks trail; keepAlive tells
// JetStream the waiting ones are in progress, so a backlog longer than
// AckWait is not redelivered (a redelivery would only run the hook twice:
// its commit is recognised as already done).
type hookQueue struct {
	mu     sync.Mutex
	cond   *sync.Cond
	q      []*queuedHook
	run    map[*queuedHook]struct{} // popped, hook running
	closed bool
	until  time.Time // after close: when pop stops handing out the rest
}

type queuedHook struct {
	h       committedResult
	touched time.Time // last delivery or InProgress
}

func newHookQueue() *hookQueue {
	q := &hookQueue{run: map[*queuedHook]struct{}{}}
	q.cond = sync.NewCond(&q.mu)
	return q
}

// push queues a committed result.
func (q *hookQueue) push(h committedResult) {
	q.mu.Lock()
	q.q = append(q.q, &queuedHook{h: h, touched: h.stored})
	q.mu.Unlock()
	q.cond.Signal()
}

// pop returns the oldest queued result, waiting for one; false once the
// queue is closed and empty, or closed and past its drain bound. Call done
// with it when its hook has run: until then keepAlive covers it too.
func (q *hookQueue) pop() (*queuedHook, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.q) == 0 && !q.closed {
		q.cond.Wait()
	}
	if len(q.q) == 0 || (q.closed && time.Now().After(q.until)) {
		return nil, false
	}
	h := q.q[0]
	q.q[0] = nil
	q.q = q.q[1:]
	q.run[h] = struct{}{}
	return h, true
}

// done says h's hook has run (and its message was acknowledged).
func (q *hookQueue) done(h *queuedHook) {
	q.mu.Lock()
	delete(q.run, h)
	q.mu.Unlock()
}

// close lets pop return false once the queue is empty or drain has
// passed: results left then are not acknowledged, and JetStream delivers
// them again (to another coordinator, or this one restarted), whose
// commit is recognised as done and whose hook then runs.
func (q *hookQueue) close(drain time.Duration) {
	q.mu.Lock()
	q.closed = true
	q.until = time.Now().Add(drain)
	q.mu.Unlock()
	q.cond.Broadcast()
}

// keepAlive marks every result (waiting, or in its hook) that has waited longer than after since it
// was delivered or last marked as in progress (JetStream restarts its
// AckWait), and returns how many it marked.
func (q *hookQueue) keepAlive(now time.Time, after time.Duration) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := 0
	mark := func(e *queuedHook) {
		if now.Sub(e.touched) >= after {
			_ = e.h.m.InProgress()
			e.touched = now
			n++
		}
	}
	for _, e := range q.q {
		mark(e)
	}
	for e := range q.run {
		mark(e)
	}
	return n
}
