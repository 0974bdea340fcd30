package monitor

import (
	"testing"

	"github.com/lesfarm/lesfarm/coordinator/regress"
	"github.com/lesfarm/lesfarm/coordinator/store"
)

// TestSiblingNoiseCache: a sibling's estimate is computed once per window
// and again whenever the window changes anywhere.
func TestSiblingNoiseCache(t *testing.T) {
	win := []store.RegressPoint{{Seq: 1, Value: 10, RunKey: "a"}, {Seq: 2, Value: 11, RunKey: "b"}, {Seq: 3, Value: 9, RunKey: "c"}}
	edit := func(f func([]store.RegressPoint)) []store.RegressPoint {
		w := append([]store.RegressPoint(nil), win...)
		f(w)
		return w
	}
	var c siblingNoiseCache
	calls := 0
	compute := func(ps []store.RegressPoint) regress.NoisePrior {
		calls++
		return regress.NoisePrior{RelVar: float64(len(ps)), DF: float64(calls)}
	}
	for _, tc := range []struct {
		name   string
		window []store.RegressPoint
		calls  int
	}{
		{"first window", win, 1},
		{"same window", edit(func([]store.RegressPoint) {}), 1},
		{"a new point", append(edit(func([]store.RegressPoint) {}), store.RegressPoint{Seq: 4, Value: 10, RunKey: "d"}), 2},
		{"back to the first", win, 3},
		{"an old point replaced", edit(func(w []store.RegressPoint) { w[0].Value = 12 }), 4},
		{"an old point's spread", edit(func(w []store.RegressPoint) { w[1].Stddev = 1 }), 5},
		{"unchanged again", edit(func(w []store.RegressPoint) { w[1].Stddev = 1 }), 5},
	} {
		got := c.estimate(7, tc.window, compute)
		if calls != tc.calls || got.RelVar != float64(len(tc.window)) {
			t.Fatalf("%s: %d computations, estimate %+v; want %d", tc.name, calls, got, tc.calls)
		}
	}
}
