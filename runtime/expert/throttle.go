package expert

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// throttleChunk is the unit of bandwidth reservation. Concurrent reads
// interleave at this granularity, so a demanded read that arrives while a
// long speculative one transfers waits at most one chunk.
const throttleChunk = 256 << 10

// Throttle emulates a device's storage for reads made through the store:
// every read costs the profile's fixed latency (reads in flight overlap
// their latencies, as a device's command queue does), then transfers its
// bytes through a token bucket shared by all reads in flight. Demanded
// transfers go first: they queue only behind other demanded transfers,
// and each of their chunks pushes the speculative timeline back by its
// duration, so the device's total bandwidth is kept while speculative
// chunks already on the wire (at most one per speculative read in flight)
// finish as reserved. Speculative transfers wait while any demanded one
// transfers. A Throttle is safe for concurrent use.
type Throttle struct {
	p *Profile // prices each read (Profile.ReadCost)

	mu         sync.Mutex
	next       time.Time // when the bucket is free for speculative transfers
	nextDemand time.Time // when it is free for demanded ones
	demand     int       // demanded reads in their transfer phase
}

// NewThrottle returns a throttle for p.
func NewThrottle(p *Profile) *Throttle {
	return &Throttle{p: p}
}

// latency returns the fixed cost of one read of n bytes.
func (t *Throttle) latency(n int64) time.Duration {
	l, _ := t.p.ReadCost(n)
	return l
}

// Wait blocks for as long as the emulated device takes to read n bytes that
// were issued at start (the read's latency and transfer rate are the
// profile's for that size, Profile.ReadCost) (the real read may already have happened in between).
// While *speculative is true the read's transfer yields to demanded reads;
// the store clears it when the read becomes demanded. Reservations run on
// the device's virtual timeline (a read's chunks follow each other and the
// bucket's previous reservation, not the time a sleep happened to end), so
// late wake-ups of a loaded machine do not lower the emulated bandwidth.
// Wait returns early with ctx's error.
func (t *Throttle) Wait(ctx context.Context, start time.Time, n int64, speculative *atomic.Bool) error {
	lat, xfer := t.p.ReadCost(n)
	bw := float64(max(n, 1)) / max(xfer.Seconds(), 1e-12) // this read's share of the bandwidth
	ready := start.Add(lat)                               // virtual time the transfer may begin
	if err := sleepUntil(ctx, ready); err != nil {
		return err
	}
	counted := false
	defer func() {
		if counted {
			t.mu.Lock()
			t.demand--
			t.mu.Unlock()
		}
	}()
	for n > 0 {
		spec := speculative != nil && speculative.Load()
		if !spec && !counted {
			t.mu.Lock()
			t.demand++
			t.mu.Unlock()
			counted = true
		}
		c := min(n, throttleChunk)
		d := time.Duration(float64(c) / bw * float64(time.Second))
		t.mu.Lock()
		if spec && t.demand > 0 {
			// Yield the bucket to demanded reads: retry after one of
			// their chunks.
			wait := t.nextDemand
			t.mu.Unlock()
			if now := time.Now(); !wait.After(now) {
				wait = now.Add(d)
			}
			if err := sleepUntil(ctx, wait); err != nil {
				return err
			}
			ready = time.Now()
			continue
		}
		var end time.Time
		if spec {
			s := latest(ready, t.next, t.nextDemand)
			end = s.Add(d)
			t.next = end
		} else {
			s := latest(ready, t.nextDemand)
			end = s.Add(d)
			t.nextDemand = end
			t.next = latest(t.next, s).Add(d)
		}
		t.mu.Unlock()
		if err := sleepUntil(ctx, end); err != nil {
			return err
		}
		ready = end
		n -= c
	}
	return nil
}

func latest(a time.Time, b ...time.Time) time.Time {
	for _, x := range b {
		if x.After(a) {
			a = x
		}
	}
	return a
}

// sleepUntil sleeps until deadline or until ctx is done, in slices of at
// most 10 ms so cancellation is prompt. It uses the precise sleep of the
// platform (nanosleep on Linux: Go's timers fire up to a millisecond late,
// which would swamp a 100 µs flash read).
func sleepUntil(ctx context.Context, deadline time.Time) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		d := time.Until(deadline)
		if d <= 0 {
			return nil
		}
		preciseSleep(min(d, 10*time.Millisecond))
	}
}

// Sleep blocks the calling goroutine's thread for d with the platform's
// precise sleep (Go's timers fire up to a millisecond late on Linux). For
// emulating short device-side delays.
func Sleep(d time.Duration) { preciseSleep(d) }

// PinThread locks the calling goroutine to its OS thread and, where the
// platform allows, lowers the thread's timer slack so Sleep is accurate to
// a few microseconds. Call runtime.UnlockOSThread when done.
func PinThread() { pinWorker() }

// maxExtraProcs caps how far throttled stores raise GOMAXPROCS.
const maxExtraProcs = 64

// procLender lends Ps to emulated-device sleepers (see reserveSleepProcs).
type procLender struct {
	mu     sync.Mutex
	extra  int // sum of workers of open throttled stores
	base   int // GOMAXPROCS before the first reservation
	raised int // GOMAXPROCS we set, 0 when not raised
}

var sleepProcs procLender

// reserveSleepProcs raises GOMAXPROCS by n (at most maxExtraProcs over the
// value it had) while a throttled store is open, and returns the function
// that gives them back. Throttled workers sleep in nanosleep, a system call
// during which their thread keeps its P until sysmon retakes it (20 µs to
// 10 ms later). With GOMAXPROCS = CPUs (2 on the dev VM) and reads in
// flight, every P can be held by a sleeping worker, so the model goroutine,
// woken by a completed read, waits for sysmon before it can compute: the
// emulated device's time turned into host scheduling delay, counted as
// stall (measured on the 2-vCPU VM: scheduled 19 → 25 tok/s, stall 0.48 →
// 0.13 with spare Ps). The same holds for workers blocked in O_DIRECT
// preads on a real disk (direct storage, paired runs: scheduled 18.6–18.9 →
// 22.6–22.8 tok/s, on-demand-parallel 13.9–14.9 → 17.0–17.6). Idle Ps cost
// nothing, and blocked workers use no CPU, so the CPUs are not
// oversubscribed.
func reserveSleepProcs(n int) (release func()) {
	l := &sleepProcs
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.extra == 0 {
		l.base = runtime.GOMAXPROCS(0)
	}
	l.extra += n
	l.setLocked()
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.extra -= n
			l.setLocked()
		})
	}
}

// setLocked sets GOMAXPROCS to base + extra (capped), or back to base when
// no store holds a reservation. It leaves GOMAXPROCS alone if someone else
// changed it meanwhile.
func (l *procLender) setLocked() {
	cur := runtime.GOMAXPROCS(0)
	if l.extra == 0 {
		if l.raised != 0 && cur == l.raised {
			runtime.GOMAXPROCS(l.base)
		}
		l.raised = 0
		return
	}
	if l.raised != 0 && cur != l.raised {
		return // changed by someone else meanwhile: theirs to manage
	}
	if want := l.base + min(l.extra, maxExtraProcs); want != cur {
		runtime.GOMAXPROCS(want)
	}
	l.raised = runtime.GOMAXPROCS(0)
}
