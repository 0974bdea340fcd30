package expert

import (
	"math"
	"slices"
	"time"
)

// psFlash is the device clock's flash for a profile with a measured
// service-time table: the reads in flight share the device, and how fast
// it serves them depends on how many there are, as the table measured it.
//
// With q reads of a class in service, each read of n bytes progresses at
// X(n, q) / q bytes per second, where X(n, q) = q·n / T(n, q) is the
// table's throughput for reads of that size at queue depth q
// (ServiceTimes.ReadTime: interpolated in size and depth). So a read alone
// takes the table's QD-1 time, and q reads issued together, or q readers
// in a closed loop as profile measure ran them, take the table's QD-q
// time; the latency is in the table's times, not a separate term. A read
// of an expert in r preads (an unpacked file's gate, up and down) is
// priced as r sequential preads of n/r bytes. Demanded reads go first: while
// any is in service the speculative ones pause, and the depth is the
// demanded reads'; else the first specMax speculative ones, in issue
// order, share the device (the store's bound on speculative reads in
// flight, which holds on a real device too).
//
// Completion times are known at each issue (no read starts later on the
// clock), so psFlash predicts them then and the store compares them with
// the clock (entry.devDone); a later issue, a promotion (a speculative read
// demanded) or a cancellation re-plans the reads still in flight.
type psFlash struct {
	st *ServiceTimes
	// specMax bounds the speculative reads in service, as the store's
	// read queue bounds them on real storage (Options.SpecInFlight); the
	// others wait in issue order. 0: no bound.
	specMax int
	simT    time.Duration // the reads' state is as of simT
	active  []*psRead
}

type psRead struct {
	e       *entry // nil for a naive synchronous read
	left    float64
	size    int64 // bytes per pread, for the table's price
	demand  bool
	serving bool          // in service in the current step (run)
	done    time.Duration // predicted completion
}

// rate returns the bytes per second of a read of size bytes among q of
// its class in service.
func (f *psFlash) rate(size int64, q int) float64 {
	t := f.st.ReadTime(size, float64(q))
	if t <= 0 {
		return math.Inf(1)
	}
	return float64(size) / t.Seconds() // = X(size, q) / q
}

// run simulates the reads in rs from t0 until limit (or until all are
// done when limit < 0), setting each finished read's done time, and
// returns the reads still in flight.
func (f *psFlash) run(rs []*psRead, t0, limit time.Duration) []*psRead {
	t := t0
	for len(rs) > 0 && (limit < 0 || t < limit) {
		demand := false
		for _, r := range rs {
			demand = demand || r.demand
		}
		// Mark the reads in service: the demanded ones, or the first
		// specMax speculative ones.
		q := 0
		for _, r := range rs {
			r.serving = r.demand == demand && (demand || f.specMax <= 0 || q < f.specMax)
			if r.serving {
				q++
			}
		}
		// The next completion among them.
		step := math.Inf(1)
		for _, r := range rs {
			if r.serving {
				step = min(step, r.left/f.rate(r.size, q))
			}
		}
		dt := secs(step)
		if step*1e9 < 1 {
			dt = 0
		}
		if limit >= 0 && t+dt > limit {
			dt = limit - t
		}
		el := dt.Seconds()
		live := rs[:0]
		for _, r := range rs {
			if r.serving {
				x := f.rate(r.size, q)
				r.left -= float64(el * x)
				if r.left <= 2e-9*x { // done within 2 ns (rounding)
					r.left = 0
					r.done = t + dt
					continue
				}
			}
			live = append(live, r)
		}
		clear(rs[len(live):])
		rs = live
		t += dt
	}
	return rs
}

// advance brings the reads' state to now, as planned at the last change.
func (f *psFlash) advance(now time.Duration) {
	if now <= f.simT {
		return
	}
	f.active = f.run(f.active, f.simT, now)
	f.simT = now
}

// plan predicts the completion of every read in flight and sets their
// entries' devDone.
func (f *psFlash) plan() {
	cp := make([]*psRead, len(f.active))
	for i, r := range f.active {
		c := *r
		cp[i] = &c
	}
	f.run(slices.Clone(cp), f.simT, -1)
	for i, r := range f.active {
		r.done = cp[i].done
		if r.e != nil {
			r.e.devDone = r.done
		}
	}
}

// issue adds a read of n bytes in runs preads issued at now, returns its
// completion as planned now.
func (f *psFlash) issue(e *entry, now time.Duration, n int64, runs int, demand bool) time.Duration {
	f.advance(now)
	runs = max(runs, 1)
	r := &psRead{e: e, left: float64(n), size: max(n/int64(runs), 1), demand: demand}
	f.active = append(f.active, r)
	f.plan()
	return r.done
}

// promote moves e's read, if still in flight, into the demanded class.
func (f *psFlash) promote(e *entry, now time.Duration) {
	f.change(e, now, func(r *psRead) bool { r.demand = true; return true })
}

// cancel drops e's read, if still in flight (a speculative read the store
// cancelled before its pread started).
func (f *psFlash) cancel(e *entry, now time.Duration) {
	f.change(e, now, func(*psRead) bool { return false })
}

// change applies fn to e's read in flight (false drops it) and re-plans.
func (f *psFlash) change(e *entry, now time.Duration, fn func(*psRead) bool) {
	f.advance(now)
	for i, r := range f.active {
		if r.e == e {
			if !fn(r) {
				f.active = slices.Delete(f.active, i, i+1)
			}
			f.plan()
			return
		}
	}
}
