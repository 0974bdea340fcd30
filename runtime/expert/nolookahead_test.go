package expert_test

import (
	"slices"
	"testing"

	"github.com/lesfarm/lesfarm/runtime/expert"
)

// TestNoLookaheadTurnsPrefetchOff: with Options.NoLookahead the lookahead
// modes ask for no predictions and queue no speculative reads (reading
// what on-demand-parallel reads), and their tokens stay
// the all-resident ones; without it the same run prefetches.
func TestNoLookaheadTurnsPrefetchOff(t *testing.T) {
	path := fixture(t, "synth/q8_0")
	prompt := []int{1, 2, 3, 4, 5}
	want := greedy(t, path, prompt, nil, nil)
	run := func(opts expert.Options) expert.Stats {
		t.Helper()
		var s *expert.Store
		got := greedy(t, path, prompt, storeSource(t, path, "", opts, 0.25, &s), nil)
		if !slices.Equal(got, want) {
			t.Fatalf("%s (no lookahead %v): tokens %v, want all-resident %v", opts.Mode, opts.NoLookahead, got, want)
		}
		if k := s.PredictK(); opts.NoLookahead && k != 0 {
			t.Fatalf("%s with NoLookahead asks the model for %d predictions per layer, want 0", opts.Mode, k)
		}
		return s.Meter().Stats()
	}
	parallel := run(expert.Options{Mode: expert.OnDemandParallel, Workers: 4})
	for _, mode := range []expert.Mode{expert.Lookahead, expert.Scheduled} {
		on := run(expert.Options{Mode: mode, Workers: 4})
		if on.PrefetchIssued == 0 {
			t.Fatalf("%s with lookahead on issued no prefetch (stats %+v): the test does not exercise it", mode, on)
		}
		off := run(expert.Options{Mode: mode, Workers: 4, NoLookahead: true})
		if off.PrefetchIssued != 0 || off.SpecReads != 0 {
			t.Errorf("%s with NoLookahead: %d prefetches queued, %d speculative reads, want none", mode, off.PrefetchIssued, off.SpecReads)
		}
		// Both read on demand only, as on-demand-parallel does; which
		// expert an eviction picks can differ by a read between runs
		// (the cache learns of reads as they complete in host time).
		if d := off.Reads - parallel.Reads; d < -2 || d > 2 || off.Demanded != parallel.Demanded {
			t.Errorf("%s with NoLookahead: %d reads of %d demanded, on-demand-parallel %d of %d: want the same demand-only reads (±2)",
				mode, off.Reads, off.Demanded, parallel.Reads, parallel.Demanded)
		}
	}
}
