package expert

import "testing"

// TestStrategies: each mode's strategy prefetches, serialises reads and
// picks the next expert to compute as the mode is documented to.
func TestStrategies(t *testing.T) {
	t.Parallel()
	type pickCase struct {
		firstReady, inOrder int
		allReady            bool
		want                int
	}
	readyFirst := []pickCase{{2, -1, false, 2}, {0, 0, true, 0}, {-1, -1, false, -1}}
	inOrder := []pickCase{{2, -1, false, -1}, {1, 1, false, 1}, {0, 0, true, 0}}
	allReady := []pickCase{{2, -1, false, -1}, {1, 1, false, -1}, {1, 1, true, 1}}
	for _, tc := range []struct {
		mode        Mode
		speculative bool
		serial      bool
		picks       []pickCase
	}{
		{OnDemand, false, true, inOrder},
		{OnDemandParallel, false, false, allReady},
		{Lookahead, true, false, allReady},
		{Scheduled, true, false, readyFirst},
		{OracleMode, false, false, readyFirst},
	} {
		st := newStrategy(tc.mode, NewOracle(&RoutingTrace{}), nil)
		if st.speculative() != tc.speculative || st.serial() != tc.serial {
			t.Errorf("%s: speculative %v serial %v, want %v and %v", tc.mode, st.speculative(), st.serial(), tc.speculative, tc.serial)
		}
		for _, p := range tc.picks {
			if got := st.pick(p.firstReady, p.inOrder, p.allReady); got != p.want {
				t.Errorf("%s: pick(%d, %d, %v) = %d, want %d", tc.mode, p.firstReady, p.inOrder, p.allReady, got, p.want)
			}
		}
		if st.planned() || st.abandon() || st.err() != nil {
			t.Errorf("%s: a strategy without a plan reports one", tc.mode)
		}
	}
	o := newStrategy(OracleMode, NewOracle(&RoutingTrace{}), &OraclePlan{})
	if !o.planned() || !o.abandon() || o.planned() || o.abandon() {
		t.Error("the oracle strategy does not drop its plan exactly once")
	}
}
