package tensor

import (
	"runtime"
	"testing"
	"time"
)

// until waits for cond, yielding the processor between checks (the
// workers' state is the event; runtime tests stay on the standard
// library), and fails the test after d.
func until(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !cond(); runtime.Gosched() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", d, what)
		}
	}
}

// TestPoolSpinAndPark dispatches jobs back to back (workers spinning) and
// after pauses longer than spinFor (workers parked): every item is done
// exactly once, and Close ends the workers.
func TestPoolSpinAndPark(t *testing.T) {
	before := runtime.NumGoroutine()
	p := NewPool(4)
	counts := make([]int32, 1000)
	for round := range 60 {
		if round%10 == 9 { // every worker parked: the job must wake them
			until(t, 5*time.Second, "every worker parked", func() bool {
				for _, w := range p.workers {
					if !w.sleeping.Load() {
						return false
					}
				}
				return true
			})
		}
		n := 1 + round*16
		p.parallel(n, func(lo, hi int) {
			for i := lo; i < hi; i++ {
				counts[i]++ // disjoint ranges: no race
			}
		})
		for i := range n {
			if counts[i] != int32(round+1)-int32(countRoundsBelow(i)) {
				t.Fatalf("round %d: item %d done %d times", round, i, counts[i])
			}
		}
	}
	p.Close()
	p.Close()
	until(t, 5*time.Second, "the workers ended after Close", func() bool { return runtime.NumGoroutine() <= before })
	// A closed pool still computes, single-threaded.
	sum := 0
	p.parallel(10, func(lo, hi int) { sum += hi - lo })
	if sum != 10 {
		t.Fatalf("closed pool covered %d of 10 items", sum)
	}
}

// countRoundsBelow is how many of the rounds before item i existed skipped
// it: round r covers items [0, 1+16r), so item i is first covered in round
// ceil((i-0)/16) (i.e. the first r with 1+16r > i).
func countRoundsBelow(i int) int {
	r := 0
	for 1+16*r <= i {
		r++
	}
	return r
}

func BenchmarkPoolDispatch(b *testing.B) {
	p := NewPool(2)
	defer p.Close()
	b.ReportAllocs()
	for b.Loop() {
		p.parallel(64, func(lo, hi int) {})
	}
}
