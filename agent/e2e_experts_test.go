package agent

import (
	"context"
	"testing"

	"github.com/lesfarm/lesfarm/coordinator/store"
)

// checkExpertLoad checks a real run's per-expert counts against its
// per-layer sample counts, config by config: every config has counts for
// its routed layers, and where the expert store reported hits and misses,
// a layer's demands are its hits + misses and its expert misses its
// misses (one definition: a hit is a demanded expert resident when
// needed).
func checkExpertLoad(t *testing.T, st *store.Store, runID int64, configs int) {
	t.Helper()
	ctx := context.Background()
	for c := range configs {
		load, err := st.ExpertLoad(ctx, runID, c)
		if err != nil {
			t.Fatal(err)
		}
		totals, steps, err := st.LayerTotals(ctx, runID, c)
		if err != nil {
			t.Fatal(err)
		}
		if len(load) == 0 {
			t.Fatalf("run %d config %d: no expert counts", runID, c)
		}
		byLayer := map[int]store.LayerTotals{}
		for _, lt := range totals {
			byLayer[lt.Layer] = lt
		}
		checked := 0
		var all, missed int64
		for _, l := range load {
			var demand, miss int64
			for e := range l.Demand {
				demand += l.Demand[e]
				miss += l.Miss[e]
			}
			if l.Steps != int64(steps) {
				t.Errorf("run %d config %d layer %d: counts cover %d steps, the samples %d", runID, c, l.Layer, l.Steps, steps)
			}
			lt := byLayer[l.Layer]
			if lt.Hits+lt.Misses == 0 {
				continue // a store that does not report hits (resident)
			}
			checked++
			all, missed = all+demand, missed+miss
			if demand != lt.Hits+lt.Misses || miss != lt.Misses {
				t.Errorf("run %d config %d layer %d: %d demands, %d misses; the samples: %d hits, %d misses", runID, c, l.Layer, demand, miss, lt.Hits, lt.Misses)
			}
		}
		t.Logf("run %d config %d: %d layers with expert counts over %d steps, %d checked against the samples (%d demands, %d misses)", runID, c, len(load), steps, checked, all, missed)
	}
}
