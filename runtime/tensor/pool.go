package tensor

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Pool runs row-parallel kernels on a fixed set of worker goroutines. The
// calling goroutine always takes part, so NewPool(n) starts n-1 workers.
// NewPool(threads) with threads <= 0 uses runtime.NumCPU(). Close stops the
// workers; a closed Pool still works, single-threaded. A Pool is safe for use
// by one caller at a time (it owns the scratch buffers of the quantized
// activations). A nil *Pool means single-threaded.
//
// Decoding one token dispatches hundreds of small products a few
// microseconds apart. Handing each to a parked goroutine costs a futex
// wake-up (tens of microseconds on a VM), as much as the product itself,
// so workers spin for spinFor after a job before they park, as ggml's
// thread pool does, and the caller spins while they finish.
type Pool struct {
	threads int
	workers []*poolWorker
	cur     *job         // the job being dispatched (set before the slots)
	running atomic.Int32 // workers still in the current job
	gen     uint64       // last dispatched generation
	done    chan struct{}
	closed  bool
	j       job
	sc      scratch
}

// poolWorker is one worker's mailbox: slot holds the generation of the job
// it should join; sleeping says it is parked on wake.
type poolWorker struct {
	slot     atomic.Uint64
	sleeping atomic.Bool
	wake     chan struct{}
}

// spinFor is how long an idle worker polls for the next job before it
// parks (the gap between the products of one token is far shorter; between
// tokens the workers park).
const spinFor = 100 * time.Microsecond

// NewPool starts a pool of threads workers (the caller counts as one).
func NewPool(threads int) *Pool {
	if threads <= 0 {
		threads = runtime.NumCPU()
	}
	p := &Pool{threads: threads, done: make(chan struct{})}
	for i := 1; i < threads; i++ {
		w := &poolWorker{wake: make(chan struct{}, 1)}
		p.workers = append(p.workers, w)
		go p.work(w)
	}
	return p
}

// work is a worker's loop: wait for its slot to change, run the job.
func (p *Pool) work(w *poolWorker) {
	var seen uint64
	for {
		g, ok := p.await(w, seen)
		if !ok {
			return
		}
		seen = g
		p.cur.run()
		p.running.Add(-1)
	}
}

// await returns the next generation w is asked to join, spinning for
// spinFor and then parking; false once the pool is closed.
func (p *Pool) await(w *poolWorker, seen uint64) (uint64, bool) {
	start := time.Now()
	for i := 0; ; i++ {
		if g := w.slot.Load(); g != seen {
			return g, true
		}
		if i&255 != 255 {
			continue
		}
		select {
		case <-p.done:
			return 0, false
		default:
		}
		if time.Since(start) < spinFor {
			runtime.Gosched()
			continue
		}
		// Park. The dispatcher stores the slot, then reads sleeping; we
		// store sleeping, then read the slot: one of us sees the other.
		w.sleeping.Store(true)
		if g := w.slot.Load(); g != seen {
			w.sleeping.Store(false)
			return g, true
		}
		select {
		case <-w.wake:
		case <-p.done:
			w.sleeping.Store(false)
			return 0, false
		}
		w.sleeping.Store(false)
		start = time.Now()
	}
}

// Threads returns the number of threads the pool computes with (1 for nil).
func (p *Pool) Threads() int {
	if p == nil || p.closed {
		return 1
	}
	return p.threads
}

// Close stops the workers. It is idempotent.
func (p *Pool) Close() {
	if p == nil || p.closed {
		return
	}
	p.closed = true
	close(p.done)
	p.workers = nil
}

// maxParts is how many matrices one MatMulMulti call may combine.
const maxParts = 16

// part is one matrix of a job: its rows are job rows [start, start+Rows).
type part struct {
	m     Matrix
	rb    int // row bytes
	k     *kernel
	dst   []float32 // n×Rows
	start int
}

// job is one parallel product over the concatenated rows of up to maxParts
// matrices sharing the input: chunks of rows handed out through an atomic
// counter, so fast threads take more chunks.
type job struct {
	parts   [maxParts]part
	np      int
	n       int       // vectors
	x       []float32 // F32 activations (n×Cols)
	sc      *scratch
	chunk   int
	nchunks int64
	next    atomic.Int64
	count   int              // items (rows) to split
	fn      func(lo, hi int) // generic work instead of rows, if set
}

func (j *job) run() {
	for {
		c := j.next.Add(1) - 1
		if c >= j.nchunks {
			return
		}
		lo := int(c) * j.chunk
		hi := min(lo+j.chunk, j.count)
		if j.fn != nil {
			j.fn(lo, hi)
		} else {
			j.rows(lo, hi)
		}
	}
}

// dispatch runs j on the pool (or inline for nil/closed pools).
func (p *Pool) dispatch(j *job) {
	threads := p.Threads()
	// ~4 chunks per thread balance load without much counter traffic; never
	// fewer than 4 rows per chunk.
	j.chunk = max(4, (j.count+4*threads-1)/(4*threads))
	j.nchunks = int64((j.count + j.chunk - 1) / j.chunk)
	j.next.Store(0)
	helpers := min(threads-1, int(j.nchunks)-1)
	if helpers > 0 {
		p.cur = j
		p.gen++
		p.running.Store(int32(helpers))
		for _, w := range p.workers[:helpers] {
			w.slot.Store(p.gen)
			if w.sleeping.Load() {
				select {
				case w.wake <- struct{}{}:
				default:
				}
			}
		}
	}
	j.run()
	if helpers > 0 {
		// The helpers are finishing their last chunks.
		for i := 0; p.running.Load() != 0; i++ {
			if i&63 == 63 {
				runtime.Gosched()
			}
		}
	}
}

// scratch holds the quantized activations of a product; buffers only grow.
type scratch struct {
	f16  []float32 // x rounded to F16, as float32
	bf16 []float32 // x rounded to BF16, as float32
	q80  []blockQ8_0
	q80d []float32 // q80[i].d, contiguous (the batched Q8_0 kernel)
	q81  []blockQ8_1
	q8k  []blockQ8K
}

type inlineState struct {
	j  job
	sc scratch
}

// inline serves nil pools: single-threaded state reused across calls.
var inline = sync.Pool{New: func() any { return new(inlineState) }}

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n, n+n/4)
	}
	return s[:n]
}

// parallel runs fn over [0,n) split into chunks on the pool (inline for a
// nil or closed pool). fn must be safe to run concurrently on disjoint
// ranges.
func (p *Pool) parallel(n int, fn func(lo, hi int)) {
	if n <= 0 {
		return
	}
	var j *job
	if p == nil || p.closed {
		j = &job{}
	} else {
		j = &p.j
	}
	j.count, j.fn = n, fn
	p.dispatch(j)
	j.fn = nil
}
