package expert

import (
	"math"
	"testing"
	"time"
)

// psTable is a table whose 1 MiB reads take 1 ms alone, 1.5 ms each at
// QD 2 (1.33× the throughput) and 2 ms at QD 4 (2×).
func psTable(t testing.TB) *ServiceTimes {
	t.Helper()
	st, err := NewServiceTimes([]int64{64 << 10, 1 << 20}, []int{1, 2, 4},
		[][]time.Duration{{100 * time.Microsecond, 150 * time.Microsecond, 200 * time.Microsecond}, {time.Millisecond, 1500 * time.Microsecond, 2 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func near(a, b time.Duration) bool { return math.Abs(float64(a-b)) <= 1000 } // 1 µs

// TestPSFlashDepth: reads issued together take the table's time at their
// depth, a read alone its QD-1 time, and a read joining others shares the
// device from then on.
func TestPSFlashDepth(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		name string
		n    int
		want time.Duration
	}{
		{"alone", 1, time.Millisecond},
		{"two together", 2, 1500 * time.Microsecond},
		{"four together", 4, 2 * time.Millisecond},
		{"three (between measured depths)", 3, time.Duration(3 / (2/1.5e-3 + 0.5*(4/2e-3-2/1.5e-3)) * 1e9)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &psFlash{st: psTable(t)}
			es := make([]*entry, tc.n)
			for i := range es {
				es[i] = &entry{}
				f.issue(es[i], 0, mib, 1, true)
			}
			for i, e := range es {
				if !near(e.devDone, tc.want) {
					t.Errorf("read %d done at %v, want %v", i, e.devDone, tc.want)
				}
			}
		})
	}
	// A second read issued half way through the first: the first has
	// 0.5 MiB left and now moves at 1 MiB per 1.5 ms: done at 0.5 + 0.75 ms;
	// the second then has 0.5 MiB left, alone: 0.5 ms more.
	f := &psFlash{st: psTable(t)}
	a, b := &entry{}, &entry{}
	f.issue(a, 0, mib, 1, true)
	f.issue(b, 500*time.Microsecond, mib, 1, true)
	if !near(a.devDone, 1250*time.Microsecond) || !near(b.devDone, 1750*time.Microsecond) {
		t.Errorf("staggered reads done at %v and %v, want 1.25 ms and 1.75 ms", a.devDone, b.devDone)
	}
	// An expert in three preads costs three preads of a third of its size.
	c := &entry{}
	(&psFlash{st: psTable(t)}).issue(c, 0, 3*(64<<10), 3, true)
	if !near(c.devDone, 300*time.Microsecond) {
		t.Errorf("three 64 KiB preads done at %v, want 300 µs", c.devDone)
	}
}

// TestPSFlashDemandFirst: a demanded read pauses the speculative ones; a
// promoted one joins the demanded class; a cancelled one frees the device.
func TestPSFlashDemandFirst(t *testing.T) {
	const mib = 1 << 20
	f := &psFlash{st: psTable(t)}
	s, d := &entry{}, &entry{}
	f.issue(s, 0, mib, 1, false)
	f.issue(d, 200*time.Microsecond, mib, 1, true)
	if !near(d.devDone, 1200*time.Microsecond) || !near(s.devDone, 2*time.Millisecond) {
		t.Errorf("demand done at %v (want 1.2 ms), paused speculative at %v (want 2 ms)", d.devDone, s.devDone)
	}
	// Promoting the speculative read at 400 µs: both demanded, sharing at
	// QD 2 from then on. s has 0.8 MiB left, d 0.8 MiB: both done 1.2 ms
	// later.
	f.promote(s, 400*time.Microsecond)
	if !near(d.devDone, 1600*time.Microsecond) || !near(s.devDone, 1600*time.Microsecond) {
		t.Errorf("after promotion: done at %v and %v, want 1.6 ms both", d.devDone, s.devDone)
	}
	// Cancelling one at 1 ms (0.4 MiB left each) lets the other finish
	// alone: 0.4 ms more.
	f.cancel(s, time.Millisecond)
	if !near(d.devDone, 1400*time.Microsecond) {
		t.Errorf("after cancelling the other: done at %v, want 1.4 ms", d.devDone)
	}
	if len(f.active) != 1 {
		t.Errorf("%d reads in flight after a cancel, want 1", len(f.active))
	}
	f.advance(2 * time.Millisecond)
	if len(f.active) != 0 {
		t.Errorf("%d reads in flight after all are done", len(f.active))
	}
}

// TestPSFlashSpecBound: speculative reads beyond the store's bound wait
// their turn in issue order.
func TestPSFlashSpecBound(t *testing.T) {
	f := &psFlash{st: psTable(t), specMax: 1}
	a, b := &entry{}, &entry{}
	f.issue(a, 0, 1<<20, 1, false)
	f.issue(b, 0, 1<<20, 1, false)
	if !near(a.devDone, time.Millisecond) || !near(b.devDone, 2*time.Millisecond) {
		t.Errorf("bounded speculative reads done at %v and %v, want 1 and 2 ms", a.devDone, b.devDone)
	}
}

// BenchmarkPSFlashIssue is the cost of one issue, an 864 KiB read every
// millisecond (a third demanded), a few in flight: the plan is quadratic
// in the reads in flight, which the store's budget bounds.
func BenchmarkPSFlashIssue(b *testing.B) {
	f := &psFlash{st: psTable(b), specMax: 4}
	es := make([]*entry, 8)
	for i := range es {
		es[i] = &entry{}
	}
	now := time.Duration(0)
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		now += time.Millisecond // under the device's capacity: a steady state
		f.issue(es[i%8], now, 884736, 1, i%3 == 0)
		i++
	}
}
