package expert_test

import (
	"context"
	"math"
	"path/filepath"
	"testing"

	fx "github.com/lesfarm/lesfarm/internal/fixture"
	"github.com/lesfarm/lesfarm/runtime/expert"
	"github.com/lesfarm/lesfarm/runtime/gguf"
	"github.com/lesfarm/lesfarm/runtime/model"
	"github.com/lesfarm/lesfarm/runtime/moe"
	"github.com/lesfarm/lesfarm/runtime/pack"
	"github.com/lesfarm/lesfarm/runtime/tensor"
)

// swizzleSpy is a store that counts the experts it serves and how many of
// them come marked Swizzled. Its Prefetch returns once the prefetched
// reads have completed, so they complete speculative (and swizzled) before
// the Use that demands them.
type swizzleSpy struct {
	*expert.Store
	served, swizzled int
}

// Prefetch implements moe.Source through the store, then waits for the
// reads it issued.
func (s *swizzleSpy) Prefetch(layer int, experts []int) {
	s.Store.Prefetch(layer, experts)
	expert.SettleReadsForTest(s.Store, layer, experts)
}

// Use implements moe.Source through the store, counting.
func (s *swizzleSpy) Use(ctx context.Context, layer int, experts []int, fn func(int, moe.Weights) error) error {
	return s.Store.Use(ctx, layer, experts, func(i int, w moe.Weights) error {
		s.served++
		if w.Swizzled {
			s.swizzled++
		}
		return fn(i, w)
	})
}

// TestStreamedSwizzledLogitsMatchResident: streamed at a tight budget, with
// the store handing the kernels its prefetched experts swizzled and its
// demanded ones in the file's layout, the Q4_K_M model's logits at every
// step of a greedy decode are bit-identical to the all-resident model's;
// the modes that never prefetch and the naive mode, which serve only the
// file's layout, too.
func TestStreamedSwizzledLogitsMatchResident(t *testing.T) {
	path := fixture(t, "repo/"+fx.RepoQ4KM)
	packed := filepath.Join(t.TempDir(), "packed.gguf")
	if err := pack.Pack(context.Background(), path, packed, pack.Options{}); err != nil {
		t.Fatal(err)
	}
	prompt := []int{1, 2, 3, 4, 5}
	want, _ := decodeLogits(t, path, prompt, nil)
	for _, tc := range []struct {
		mode     expert.Mode
		packed   bool
		swizzles bool // the store serves some experts swizzled
	}{
		{expert.OnDemand, false, false},
		{expert.Lookahead, true, true},
		{expert.Scheduled, true, true},
		{expert.Scheduled, false, true},
		{expert.Naive, false, false},
	} {
		name := tc.mode.String()
		expertsPath := ""
		if tc.packed {
			name, expertsPath = name+"/packed", packed
		}
		t.Run(name, func(t *testing.T) {
			var spy *swizzleSpy
			open := storeSource(t, path, expertsPath, expert.Options{Mode: tc.mode, Workers: 4}, 0.3, nil)
			got, shapes := decodeLogits(t, path, prompt, func(f *gguf.File, sh []moe.LayerShape) (moe.Source, error) {
				src, err := open(f, sh)
				if err != nil {
					return nil, err
				}
				spy = &swizzleSpy{Store: src.(*expert.Store)}
				return spy, nil
			})
			for i := range want {
				if len(got[i]) != len(want[i]) {
					t.Fatalf("step %d: %d logits, want %d", i, len(got[i]), len(want[i]))
				}
				for j := range want[i] {
					if math.Float32bits(got[i][j]) != math.Float32bits(want[i][j]) {
						t.Fatalf("step %d logit %d: %v, all-resident %v", i, j, got[i][j], want[i][j])
					}
				}
			}
			st := spy.Meter().Stats()
			if st.Misses == 0 || st.Reads == 0 {
				t.Fatalf("no expert was read (stats %+v): the test does not stream", st)
			}
			// without a swizzled Q4_K layout here (purego, arm64) none is
			if want := tc.swizzles && tensor.Swizzles(tensor.Q4_K); (spy.swizzled > 0) != want || spy.swizzled == spy.served {
				t.Fatalf("%d of %d experts served marked Swizzled, want some: %v (and some not)", spy.swizzled, spy.served, want)
			}
			if tc.swizzles && tensor.Swizzles(tensor.Q4_K) && !hasType(shapes, tensor.Q4_K) {
				t.Fatal("the fixture's experts have no Q4_K part: the test swizzles nothing")
			}
		})
	}
}

// decodeLogits loads the model at path with the given expert source (nil:
// all resident), feeds prompt and then greedily decodes 8 tokens, and
// returns the logits of every step and the model's expert shapes.
func decodeLogits(t *testing.T, path string, prompt []int, src func(*gguf.File, []moe.LayerShape) (moe.Source, error)) ([][]float32, []moe.LayerShape) {
	t.Helper()
	var shapes []moe.LayerShape
	opts := model.Options{Threads: 2}
	if src != nil {
		opts.Experts = func(f *gguf.File, sh []moe.LayerShape) (moe.Source, error) {
			shapes = sh
			return src(f, sh)
		}
	}
	m, err := model.Load(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	st, err := m.NewState(len(prompt) + 8)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]float32
	tokens := prompt
	for range 9 {
		logits, err := st.Forward(context.Background(), tokens, false)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, append([]float32(nil), logits...))
		best := 0
		for j, v := range logits {
			if v > logits[best] {
				best = j
			}
		}
		tokens = []int{best}
	}
	return out, shapes
}

// hasType reports whether any expert part of shapes is of type typ.
func hasType(shapes []moe.LayerShape, typ tensor.Type) bool {
	for _, sh := range shapes {
		if sh.Experts > 0 && (sh.GateType == typ || sh.UpType == typ || sh.DownType == typ) {
			return true
		}
	}
	return false
}
