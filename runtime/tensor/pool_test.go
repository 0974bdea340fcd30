package tensor

import (
	"runtime"
	"testing"
	"time"
)

// TestPoolSpinAndPark dispatches jobs back to back (workers spinning) and
// after pauses longer than spinFor (workers parked): every item is done
// exactly once, and Close ends the workers.
func TestPoolSpinAndPark(t *testing.T) {
	before := runtime.NumGoroutine()
	p := NewPool(4)
	counts := make([]int32, 1000)
	for round := range 60 {
		if round%10 == 9 {
			time.Sleep(3 * spinFor)
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
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if g := runtime.NumGoroutine(); g > before {
		t.Fatalf("%d goroutines after Close, %d before NewPool", g, before)
	}
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
