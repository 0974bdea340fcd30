package store_test

import (
	"fmt"
	"testing"

	"github.com/lesfarm/lesfarm/coordinator/store"
)

// TestSeriesBuildOrder: points are ordered by their build's position, then seq;
// a point without a position sits after the newest build that had run
// before it, and points without positions keep seq order.
func TestSeriesBuildOrder(t *testing.T) {
	t.Parallel()
	p := func(seq, pos int64) store.RegressPoint { return store.RegressPoint{Seq: seq, BuildPosition: pos} }
	for _, tc := range []struct {
		name string
		in   []store.RegressPoint
		want string
	}{
		{"no positions: seq order", []store.RegressPoint{p(3, 0), p(1, 0), p(2, 0)}, "[1 2 3]"},
		{"a build pushed after an older one and run last", []store.RegressPoint{p(1, 1), p(2, 3), p(3, 4), p(4, 2)}, "[1 4 2 3]"},
		{"an unregistered point after the newest build that ran", []store.RegressPoint{p(1, 1), p(2, 3), p(3, 0), p(4, 2)}, "[1 4 2 3]"},
		{"labels from before the registry come first", []store.RegressPoint{p(1, 0), p(2, 0), p(3, 2), p(4, 1)}, "[1 2 4 3]"},
		{"reruns share a seq", []store.RegressPoint{p(1, 2), p(1, 2), p(2, 1)}, "[2 1]"},
	} {
		if got := fmt.Sprint(store.BuildOrder(tc.in)); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}
