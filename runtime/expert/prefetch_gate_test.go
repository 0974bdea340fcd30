package expert

import (
	"testing"

	"github.com/lesfarm/lesfarm/runtime/moe"
)

// TestPrefetchGate: a rank is prefetched while its measured precision
// beats (1 + q) / 2, where q is the evicted expert's chance of being
// demanded at its layer's next visit.
func TestPrefetchGate(t *testing.T) {
	t.Parallel()
	g := newPrefetchGate(2, 2)
	// Before any measurement: ranks within predict-k are worth a free
	// slot, lower ranks are not.
	for _, tc := range []struct {
		rank int
		q    float64
		want bool
	}{{0, 0, true}, {1, 0, true}, {2, 0, false}, {0, 0.9, false}} {
		if got := g.worth(0, tc.rank, tc.q); got != tc.want {
			t.Errorf("prior: worth(rank %d, q %.1f) = %v, want %v", tc.rank, tc.q, got, tc.want)
		}
	}
	// Layer 0: rank 0 always right, rank 1 right 60%, rank 2 right 30%.
	for i := range 100 {
		demanded := []int{10}
		if i%10 < 6 {
			demanded = append(demanded, 11)
		}
		if i%10 < 3 {
			demanded = append(demanded, 12)
		}
		g.observe(0, []int{10, 11, 12}, demanded)
		g.demand(0, demanded)
	}
	for _, tc := range []struct {
		rank int
		q    float64
		want bool
	}{
		{0, 0, true}, {0, 0.9, true},
		{1, 0, true}, {1, 0.1, true}, {1, 0.3, false},
		{2, 0, false},
	} {
		if got := g.worth(0, tc.rank, tc.q); got != tc.want {
			t.Errorf("measured: worth(rank %d, q %.1f) = %v (precision %.2f), want %v", tc.rank, tc.q, got, g.precision(0, tc.rank), tc.want)
		}
	}
	if p := g.precision(0, 1); p < 0.58 || p > 0.65 {
		t.Errorf("rank 1 precision %.3f, want about 0.6", p)
	}
	// Reuse: expert 10 is demanded at every visit, 12 at 30%, 99 never.
	for _, tc := range []struct {
		e    int
		want float64
	}{{10, 1}, {12, 0.3}, {99, 0}} {
		if got := g.reuse(Key{0, int32(tc.e)}); got != tc.want {
			t.Errorf("reuse of expert %d = %v, want %v", tc.e, got, tc.want)
		}
	}
	if got := g.reuse(Key{1, 10}); got != 0 {
		t.Errorf("reuse in a layer never visited = %v", got)
	}
}

// TestPrefetchGateSkips: a store whose predictor is always wrong stops
// prefetching once it has measured that, and a store with PrefetchAll
// keeps prefetching.
func TestPrefetchGateSkips(t *testing.T) {
	t.Parallel()
	m := newTestModel(t, 2, 16, 16, 16, true)
	one := planRead(m.layout.Experts[0][0], 1).size
	issued := map[bool]int64{}
	for _, all := range []bool{false, true} {
		s, err := New(m.path, m.layout, m.shapes, Options{Mode: Scheduled, Budget: 8 * one, Workers: 2, PredictK: 2, PrefetchAll: all})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 40 {
			for l := range 2 {
				// Predict experts 14 and 15, demand 0 and 1: never right.
				s.Prefetch(l, []int{14, 15})
				if err := s.Use(t.Context(), l, []int{i % 2, 2 + i%3}, func(int, moe.Weights) error { return nil }); err != nil {
					t.Fatal(err)
				}
			}
		}
		st := s.Meter().Stats()
		s.Close()
		if all && st.PrefetchSkipped != 0 {
			t.Fatalf("PrefetchAll skipped %d predictions", st.PrefetchSkipped)
		}
		if !all && st.PrefetchSkipped == 0 {
			t.Fatal("the gated store skipped no wrong prediction")
		}
		issued[all] = st.PrefetchIssued
	}
	if issued[false]*2 > issued[true] {
		t.Fatalf("gated store issued %d prefetches of always-wrong predictions, ungated %d", issued[false], issued[true])
	}
}
