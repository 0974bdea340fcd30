package expert

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/runtime/moe"
	"github.com/lesfarm/lesfarm/runtime/tensor"
)

// TestStoreServesSwizzledExperts: the cache modes hand out each expert in
// the kernels' swizzled layout (the file's Q4_K bytes swizzled exactly
// once, marked Swizzled) through misses, hits and reused buffers, on every
// storage (file, direct, emulated flash); the naive mode hands out the
// file's bytes unmarked. Where this machine has no swizzled Q4_K layout
// (arm64, purego) the bytes served are the file's.
func TestStoreServesSwizzledExperts(t *testing.T) {
	t.Parallel()
	const layers, experts = 4, 16
	fast := &Profile{Name: "fast", Bandwidth: 8 << 30, Latency: time.Microsecond, MaxInFlight: 8}
	for _, tc := range []struct {
		name          string
		opts          Options
		packed        bool
		budgetExperts int64
		swizzled      bool // the store marks the experts it serves
		reuse         bool // the budget is tight: buffers are read into again
	}{
		{"on-demand/stacked/tight", Options{Mode: OnDemand}, false, 2, true, true},
		{"on-demand/packed/roomy", Options{Mode: OnDemand}, true, 40, true, false},
		{"parallel/stacked/tight", Options{Mode: OnDemandParallel}, false, 5, true, true},
		{"lookahead/packed/tight", Options{Mode: Lookahead}, true, 6, true, true},
		{"lookahead/stacked/roomy", Options{Mode: Lookahead}, false, 40, true, false},
		{"scheduled/packed/direct", Options{Mode: Scheduled, Direct: true}, true, 40, true, false},
		{"scheduled/stacked/flash", Options{Mode: Scheduled, Profile: fast}, false, 6, true, true},
		{"oracle/packed/tight", Options{Mode: OracleMode}, true, 5, true, true},
		{"naive/stacked", Options{Mode: Naive}, false, 24, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := newTypedTestModel(t, tensor.Q4_K, layers, experts, 256, 256, tc.packed)
			tr := randomTrace(5, 30, layers, experts, 4)
			want := servedParts(t, m, tc.swizzled)
			opts := tc.opts
			opts.Budget = tc.budgetExperts * planRead(m.layout.Experts[0][0], directAlign).size
			opts.Trace, opts.Workers, opts.PredictK = tr, 4, 4
			s, err := New(m.path, m.layout, m.shapes, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			ctx := context.Background()
			for ci, c := range tr.Calls {
				if s.PredictK() > 0 && ci+1 < len(tr.Calls) {
					s.Prefetch(tr.Calls[ci+1].Layer, tr.Calls[ci+1].Experts)
				}
				err := s.Use(ctx, c.Layer, c.Experts, func(i int, w moe.Weights) error {
					if w.Swizzled != tc.swizzled {
						return fmt.Errorf("expert %d: Swizzled %v, want %v", c.Experts[i], w.Swizzled, tc.swizzled)
					}
					for p, got := range [3][]byte{w.Gate, w.Up, w.Down} {
						if !bytes.Equal(got, want[c.Layer][c.Experts[i]][p]) {
							return fmt.Errorf("expert %d part %d: bytes differ from the file's (swizzled %v)", c.Experts[i], p, tc.swizzled)
						}
					}
					return nil
				})
				if err != nil {
					t.Fatalf("call %d (layer %d): %v", ci, c.Layer, err)
				}
			}
			st := s.Meter().Stats()
			if st.Hits == 0 || st.Misses == 0 {
				t.Fatalf("hits %d, misses %d: the test must serve both", st.Hits, st.Misses)
			}
			if tc.reuse && st.Reads <= int64(tc.budgetExperts) {
				t.Fatalf("%d reads within a budget of %d experts: no buffer was reused", st.Reads, tc.budgetExperts)
			}
		})
	}
}

// servedParts returns the bytes a store must serve for each part of m's
// experts: the file's, swizzled once where this machine has a swizzled
// layout for the part's type when swizzled is set.
func servedParts(t *testing.T, m *testModel, swizzled bool) [][][3][]byte {
	t.Helper()
	out := make([][][3][]byte, len(m.layout.Experts))
	changed := false
	for l, exps := range m.layout.Experts {
		sh := m.shapes[l]
		out[l] = make([][3][]byte, len(exps))
		for e, parts := range exps {
			for p, typ := range [3]tensor.Type{sh.GateType, sh.UpType, sh.DownType} {
				raw := m.data[parts[p].Off : parts[p].Off+parts[p].Len]
				b := bytes.Clone(raw)
				if swizzled {
					if _, err := tensor.Swizzle(typ, b); err != nil {
						t.Fatal(err)
					}
				}
				changed = changed || !bytes.Equal(b, raw)
				out[l][e][p] = b
			}
		}
	}
	if want := swizzled && tensor.Swizzles(m.shapes[0].GateType); changed != want {
		t.Fatalf("swizzling changed the bytes: %v, want %v", changed, want)
	}
	return out
}
