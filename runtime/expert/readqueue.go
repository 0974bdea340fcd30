package expert

import (
	"sync"
	"time"

	"github.com/lesfarm/lesfarm/runtime/moe"
)

// readQueue is the store's two-class read queue and the pool of workers
// that serve it. Demanded reads always start before speculative ones;
// speculative reads start only while fewer than specMax are in flight and,
// unless overlap is set, while no demanded read is in flight. It shares the
// store's lock: methods ending in Locked need it held, and the workers take
// it around each job. Completed reads are signalled on done.
type readQueue struct {
	mu   *sync.Mutex
	work *sync.Cond // workers wait for jobs
	// done receives a value (without blocking) after each completed read,
	// so the model goroutine waiting in Use wakes up.
	done chan struct{}

	demand     []*entry
	spec       []*entry
	demFlight  int // demanded reads in flight
	specFlight int // speculative reads in flight
	specMax    int
	// overlap lets a speculative read start beside a demanded one. It is
	// set under an emulated device (which serves demanded transfers first
	// itself) and for the oracle (whose reads are all needed).
	overlap bool
	// emulated: the device is a storage profile, which orders transfers
	// itself, so a finished demanded read need not wake held-back
	// speculative reads.
	emulated bool
	closed   bool
	wg       sync.WaitGroup
	// onPush, if set, is called (with the lock held) for each read queued,
	// and whether it is demanded.
	onPush func(e *entry, demand bool)
}

// readResult is the outcome of one read.
type readResult struct {
	w       moe.Weights
	n       int64 // bytes read
	err     error
	latency time.Duration
	spec    bool // served from the speculative class
}

// readHandler does the work of a read for the queue's workers (the
// store: its reader reads, its cache takes the result).
type readHandler interface {
	// fetch reads e's expert into buf, without the lock.
	fetch(e *entry, buf []byte) readResult
	// finishLocked records a completed read, with the lock held.
	finishLocked(e *entry, r readResult)
	// reported is called without the lock once the read is complete and
	// the waiting model goroutine has been woken.
	reported(e *entry, r readResult)
}

func newReadQueue(mu *sync.Mutex, specMax int, overlap, emulated bool) *readQueue {
	return &readQueue{mu: mu, work: sync.NewCond(mu), done: make(chan struct{}, 1), specMax: specMax, overlap: overlap, emulated: emulated}
}

// start launches n workers serving r; pin locks each worker to its thread
// (for emulated devices, whose waits are timed by nanosleep).
func (q *readQueue) start(n int, r readHandler, pin bool) {
	for range n {
		q.wg.Add(1)
		go q.worker(r, pin)
	}
}

// closeLocked tells the workers to stop once their current read is done.
func (q *readQueue) closeLocked() {
	q.closed = true
	q.work.Broadcast()
}

// wait waits for the workers to stop (after closeLocked).
func (q *readQueue) wait() { q.wg.Wait() }

// pushDemandLocked queues a demanded read; the caller wakes workers.
func (q *readQueue) pushDemandLocked(e *entry) {
	q.demand = append(q.demand, e)
	if q.onPush != nil {
		q.onPush(e, true)
	}
}

// pushSpecLocked queues a speculative read; the caller wakes workers.
func (q *readQueue) pushSpecLocked(e *entry) {
	q.spec = append(q.spec, e)
	e.inSpecQ = true
	if q.onPush != nil {
		q.onPush(e, false)
	}
}

// promoteLocked moves a queued speculative read to the demand class.
func (q *readQueue) promoteLocked(e *entry) {
	q.dropSpecLocked(e)
	q.demand = append(q.demand, e)
}

// dropSpecLocked removes a queued speculative read that has not started.
func (q *readQueue) dropSpecLocked(e *entry) {
	removeEntry(&q.spec, e)
	e.inSpecQ = false
}

// drainSpecLocked removes every queued speculative read, calling fn for
// each, and reports whether there were any.
func (q *readQueue) drainSpecLocked(fn func(*entry)) bool {
	if len(q.spec) == 0 {
		return false
	}
	for _, e := range q.spec {
		e.inSpecQ = false
		fn(e)
	}
	clear(q.spec)
	q.spec = q.spec[:0]
	return true
}

// specIdleLocked reports whether no speculative read is queued or in
// flight.
func (q *readQueue) specIdleLocked() bool { return q.specFlight == 0 && len(q.spec) == 0 }

// demandQueuedLocked reports whether a demanded read waits for a worker.
func (q *readQueue) demandQueuedLocked() bool { return len(q.demand) > 0 }

// wakeLocked wakes up to n idle workers for n new jobs (not all of them:
// with 32 workers a broadcast per read costs more CPU than the reads).
func (q *readQueue) wakeLocked(n int) {
	for range n {
		q.work.Signal()
	}
}

// specMayStartLocked says whether a worker may start a speculative read:
// one is queued, fewer than specMax are in flight, and, on real storage,
// no demanded read is in flight. A real device cannot tell demanded reads
// from speculative ones, so a speculative read started beside a demanded
// one delays it; speculation then only uses the time the device would
// otherwise be idle (compute). Under a storage profile the emulated device
// serves demanded transfers first itself, and the oracle's reads are all
// needed.
func (q *readQueue) specMayStartLocked() bool {
	if len(q.spec) == 0 || q.specFlight >= q.specMax {
		return false
	}
	return q.overlap || q.demFlight == 0
}

// worker serves the queues: demanded reads first, speculative reads only
// while specMayStartLocked allows.
func (q *readQueue) worker(r readHandler, pin bool) {
	defer q.wg.Done()
	if pin {
		pinWorker() // the thread ends with the goroutine (never unlocked)
	}
	for {
		q.mu.Lock()
		for !q.closed && len(q.demand) == 0 && !q.specMayStartLocked() {
			q.work.Wait()
		}
		if q.closed {
			q.mu.Unlock()
			return
		}
		var e *entry
		specSlot := false
		if len(q.demand) > 0 {
			e = q.demand[0]
			q.demand[0] = nil
			q.demand = q.demand[1:]
			q.demFlight++
		} else {
			e = q.spec[0]
			q.spec[0] = nil
			q.spec = q.spec[1:]
			e.inSpecQ = false
			q.specFlight++
			specSlot = true
		}
		e.state = stReading
		buf := e.buf
		q.mu.Unlock()

		res := r.fetch(e, buf)
		res.spec = specSlot

		q.mu.Lock()
		if specSlot {
			q.specFlight--
		} else {
			q.demFlight--
		}
		r.finishLocked(e, res)
		// This worker takes the next job itself; wake one more only if a
		// freed speculative slot leaves work for it.
		if specSlot && len(q.spec) > 1 {
			q.work.Signal()
		}
		if !specSlot && q.demFlight == 0 && !q.emulated {
			// Speculative reads held back by demand may start now.
			q.wakeLocked(min(len(q.spec), q.specMax-q.specFlight))
		}
		q.mu.Unlock()
		select {
		case q.done <- struct{}{}:
		default:
		}
		r.reported(e, res)
	}
}

// removeEntry removes e from q, keeping the order of the rest.
func removeEntry(q *[]*entry, e *entry) {
	for i, x := range *q {
		if x == e {
			copy((*q)[i:], (*q)[i+1:])
			(*q)[len(*q)-1] = nil
			*q = (*q)[:len(*q)-1]
			return
		}
	}
}
