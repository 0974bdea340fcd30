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

// TestStoreServesSwizzledExperts: the store hands out the experts it
// read speculatively in the kernels' swizzled layout (the file's Q4_K bytes
// swizzled exactly once, marked Swizzled) and the ones the model waited for
// in the file's layout, unmarked, through misses, hits and reused buffers,
// on every storage (file, direct, emulated flash). Each prefetch here
// completes before its Use (settleReads), so the lookahead modes must
// serve swizzled experts; the on-demand modes, the oracle (whose reads are
// not speculative) and the naive mode serve none. Where this machine has
// no swizzled Q4_K layout (arm64, purego) every byte served is the
// file's.
func TestStoreServesSwizzledExperts(t *testing.T) {
	t.Parallel()
	const layers, experts = 4, 16
	fast := &Profile{Name: "fast", Bandwidth: 8 << 30, Latency: time.Microsecond, MaxInFlight: 8}
	for _, tc := range []struct {
		name          string
		opts          Options
		packed        bool
		budgetExperts int64
		swizzles      bool // some experts come swizzled (prefetched ones)
		reuse         bool // the budget is tight: buffers are read into again
	}{
		{"on-demand/stacked/tight", Options{Mode: OnDemand}, false, 2, false, true},
		{"parallel/packed/roomy", Options{Mode: OnDemandParallel}, true, 40, false, false},
		{"lookahead/packed/tight", Options{Mode: Lookahead}, true, 8, true, true},
		{"lookahead/stacked/roomy", Options{Mode: Lookahead}, false, 40, true, false},
		{"scheduled/packed/direct", Options{Mode: Scheduled, Direct: true}, true, 40, true, false},
		{"scheduled/stacked/flash", Options{Mode: Scheduled, Profile: fast}, false, 8, true, true},
		{"oracle/packed/tight", Options{Mode: OracleMode}, true, 5, false, true},
		{"naive/stacked", Options{Mode: Naive}, false, 24, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := newTypedTestModel(t, tensor.Q4_K, layers, experts, 256, 256, tc.packed)
			tr := randomTrace(5, 30, layers, experts, 4)
			raw, swz := servedParts(t, m, false), servedParts(t, m, true)
			opts := tc.opts
			opts.Budget = tc.budgetExperts * planRead(m.layout.Experts[0][0], directAlign).size
			opts.Trace, opts.Workers, opts.PredictK = tr, 4, 4
			s, err := New(m.path, m.layout, m.shapes, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			ctx := context.Background()
			swizzled := 0
			for ci, c := range tr.Calls {
				if s.PredictK() > 0 && ci+1 < len(tr.Calls) {
					next := tr.Calls[ci+1]
					s.Prefetch(next.Layer, next.Experts)
					settleReads(s, next.Layer, next.Experts)
				}
				err := s.Use(ctx, c.Layer, c.Experts, func(i int, w moe.Weights) error {
					want := raw[c.Layer][c.Experts[i]]
					if w.Swizzled {
						swizzled++
						want = swz[c.Layer][c.Experts[i]]
					}
					for p, got := range [3][]byte{w.Gate, w.Up, w.Down} {
						if !bytes.Equal(got, want[p]) {
							return fmt.Errorf("expert %d part %d (Swizzled %v): bytes differ from the file's in that layout", c.Experts[i], p, w.Swizzled)
						}
					}
					return nil
				})
				if err != nil {
					t.Fatalf("call %d (layer %d): %v", ci, c.Layer, err)
				}
			}
			st := s.Meter().Stats()
			// a machine without a swizzled Q4_K layout (purego, arm64)
			// serves every expert in the file's layout
			if want := tc.swizzles && tensor.Swizzles(tensor.Q4_K); (swizzled > 0) != want {
				t.Fatalf("%d of %d experts served swizzled, want some: %v (hits %d, misses %d, prefetches used %d)", swizzled, st.Demanded, want, st.Hits, st.Misses, st.PrefetchUsed)
			}
			if st.Hits == 0 || st.Misses == 0 {
				t.Fatalf("hits %d, misses %d: the test must serve both", st.Hits, st.Misses)
			}
			if tc.reuse && st.Reads <= tc.budgetExperts {
				t.Fatalf("%d reads within a budget of %d experts: no buffer was reused", st.Reads, tc.budgetExperts)
			}
		})
	}
}

// TestFetchSwizzlesOnlySpeculativeReads: a read that completes while
// still speculative comes back swizzled and marked; one the model waits
// for comes back as the file has it.
func TestFetchSwizzlesOnlySpeculativeReads(t *testing.T) {
	t.Parallel()
	m := newTypedTestModel(t, tensor.Q4_K, 1, 4, 256, 256, true)
	raw, swz := servedParts(t, m, false), servedParts(t, m, true)
	s, err := New(m.path, m.layout, m.shapes, Options{Mode: Scheduled, Budget: 4 * m.expertBytes()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, tc := range []struct {
		name     string
		spec     bool
		expert   int32
		swizzled bool
	}{
		{"demanded", false, 1, false},
		{"speculative", true, 2, true},
		{"demanded again", false, 3, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := &entry{key: Key{0, tc.expert}}
			e.spec.Store(tc.spec)
			buf := make([]byte, s.bufSize[0])
			r := s.fetch(e, buf)
			if r.err != nil {
				t.Fatal(r.err)
			}
			swizzled := tc.swizzled && tensor.Swizzles(tensor.Q4_K) // none without the layout
			if r.w.Swizzled != swizzled {
				t.Fatalf("Swizzled %v, want %v", r.w.Swizzled, swizzled)
			}
			want := raw[0][tc.expert]
			if swizzled {
				want = swz[0][tc.expert]
			}
			for p, got := range [3][]byte{r.w.Gate, r.w.Up, r.w.Down} {
				if !bytes.Equal(got, want[p]) {
					t.Fatalf("part %d: bytes differ from the file's in the layout the flag says", p)
				}
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
