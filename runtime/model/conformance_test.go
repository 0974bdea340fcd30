package model

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	fx "github.com/lesfarm/lesfarm/internal/fixture"

	"github.com/lesfarm/lesfarm/runtime/sample"
	"github.com/lesfarm/lesfarm/runtime/tokenizer"
)

// goldenRef is the subset of a golden *.ref.json the conformance tests use
// (see ../shared/testdata/golden/README.md).
type goldenRef struct {
	NVocab  int `json:"n_vocab"`
	NLayer  int `json:"n_layer"`
	Prompts []struct {
		Text     string `json:"text"`
		TokenIDs []int  `json:"token_ids"`
		Greedy   struct {
			TokenIDs []int `json:"token_ids"`
			Top5     []struct {
				Margin float64 `json:"margin"`
			} `json:"top5_per_step"`
		} `json:"greedy"`
		Logits []struct {
			Position     int       `json:"position"`
			InputTokenID int       `json:"input_token_id"`
			Values       []float32 `json:"values"`
		} `json:"logits"`
		Positions []struct {
			Pos     int `json:"pos"`
			TokenID int `json:"token_id"`
			Layers  []struct {
				ExpertIDs       []int   `json:"expert_ids"`
				SelectionMargin float64 `json:"selection_margin"`
			} `json:"layers"`
		} `json:"positions"`
	} `json:"prompts"`
}

// tolerances of one fixture, with the reason for each in the table below.
type tolerances struct {
	maxAbsLogit float64 // max |Δlogit| allowed ...
	minCosine   float64 // ... unless the cosine similarity is above this
	routeMargin float64 // routing entries with selection_margin below are skipped
	greedyMarg  float64 // greedy compared up to the first ref margin below this
}

// sharedTestdata returns ../shared/testdata seen from the repo root.
func sharedTestdata(t testing.TB) string {
	t.Helper()
	return fx.SharedDir()
}

func fixture(t testing.TB, rel string) string {
	t.Helper()
	var p string
	if filepath.Dir(rel) == "testdata" {
		p = rel
	} else {
		p = filepath.Join(sharedTestdata(t), rel)
	}
	if _, err := os.Stat(p); err != nil {
		fx.Missing(t, p, err, "this conformance check")
	}
	return p
}

func readJSON(t testing.TB, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func compareLogits(got, want []float32) (maxAbs, cos float64) {
	var dot, na, nb float64
	for i := range want {
		d := math.Abs(float64(got[i]) - float64(want[i]))
		maxAbs = max(maxAbs, d)
		dot += float64(got[i]) * float64(want[i])
		na += float64(got[i]) * float64(got[i])
		nb += float64(want[i]) * float64(want[i])
	}
	return maxAbs, dot / math.Sqrt(na*nb)
}

// Golden fixtures and their tolerances. F32 follows issue 3 exactly. For the
// quantized files, the logit tolerance is the README's suggested 0.1 (we
// emulate llama.cpp's Q8_0/Q8_K activation quantization; one int8 rounding
// flip moves logits by ~0.03), with cosine > 0.999 as the alternative; the
// greedy comparison stops at the first reference margin below 0.1, because a
// smaller margin can flip under that logit tolerance.
var goldenCases = []struct {
	name, model, ref string
	tol              tolerances
}{
	// F32: issue 3 allows 1e-3 and a greedy margin cut of 1e-2; we measure
	// 2.3e-6, so greedy is required up to the first margin below 1e-4,
	// which makes all 32 tokens of every prompt mandatory (smallest ref
	// margin 1.9e-3).
	{"f32", "golden/tiny-qwen3moe-f32.gguf", "golden/tiny-qwen3moe-f32.ref.json", tolerances{1e-3, 2, 5e-3, 1e-4}},
	{"q8_0", "golden/tiny-qwen3moe-q8_0.gguf", "golden/tiny-qwen3moe-q8_0.ref.json", tolerances{0.1, 0.999, 5e-3, 0.1}},
	{"q4_k_m", "testdata/tiny-qwen3moe-q4_k_m.gguf", "testdata/tiny-qwen3moe-q4_k_m.ref.json", tolerances{0.1, 0.999, 5e-3, 0.1}},
	{"mixed", "golden/tiny-qwen3moe-mixed.gguf", "golden/tiny-qwen3moe-mixed.ref.json", tolerances{0.1, 0.999, 5e-3, 0.1}},
}

func TestGoldenConformance(t *testing.T) {
	for _, tc := range goldenCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := fixture(t, tc.model)
			var ref goldenRef
			readJSON(t, fixture(t, tc.ref), &ref)
			m, err := Load(path, Options{Threads: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			if m.Vocab != ref.NVocab || len(m.Layers) != ref.NLayer {
				t.Fatalf("model has vocab %d, %d layers; ref says %d, %d", m.Vocab, len(m.Layers), ref.NVocab, ref.NLayer)
			}
			tok, err := tokenizer.FromGGUF(m.File)
			if err != nil {
				t.Fatal(err)
			}
			for pi, pr := range ref.Prompts {
				if got := tok.Tokenize(pr.Text, true, false); !slices.Equal(got, pr.TokenIDs) {
					t.Errorf("prompt %d %q: tokens %v, ref %v", pi, pr.Text, got, pr.TokenIDs)
				}
			}
			var worst, worstCos = 0.0, 1.0
			routed, skipped, diffs, skippedDiff := 0, 0, 0, 0
			for pi, pr := range ref.Prompts {
				// Routing observed at every position: prompt batch, then the
				// four teacher-forced decode steps.
				type key struct{ pos, layer int }
				got := map[key][]int{}
				st, err := m.NewState(0)
				if err != nil {
					t.Fatal(err)
				}
				st.OnRoute = func(pos, layer int, experts []int, _ []float32) {
					got[key{pos, layer}] = slices.Clone(experts)
				}
				ctx := context.Background()
				logits, err := st.Forward(ctx, pr.TokenIDs, false)
				if err != nil {
					t.Fatal(err)
				}
				for li, lg := range pr.Logits {
					if li > 0 {
						if lg.Position != st.Pos() {
							t.Fatalf("prompt %d: ref logits entry %d at position %d, cache at %d", pi, li, lg.Position, st.Pos())
						}
						if logits, err = st.Forward(ctx, []int{lg.InputTokenID}, false); err != nil {
							t.Fatal(err)
						}
					}
					d, c := compareLogits(logits, lg.Values)
					worst, worstCos = max(worst, d), min(worstCos, c)
					if d > tc.tol.maxAbsLogit && c < tc.tol.minCosine {
						t.Errorf("prompt %d pos %d: max |Δlogit| %.3g (tol %g), cosine %.6f (tol %g)", pi, lg.Position, d, tc.tol.maxAbsLogit, c, tc.tol.minCosine)
					}
				}
				for _, p := range pr.Positions {
					for l, lr := range p.Layers {
						g, ok := got[key{p.Pos, l}]
						if !ok {
							t.Fatalf("prompt %d: no routing captured at pos %d layer %d", pi, p.Pos, l)
						}
						a, b := slices.Sorted(slices.Values(g)), slices.Sorted(slices.Values(lr.ExpertIDs))
						if lr.SelectionMargin < tc.tol.routeMargin {
							skipped++
							if !slices.Equal(a, b) {
								skippedDiff++
							}
							continue
						}
						routed++
						if !slices.Equal(a, b) {
							diffs++
							t.Errorf("prompt %d pos %d layer %d: experts %v, ref %v (margin %.2g)", pi, p.Pos, l, g, lr.ExpertIDs, lr.SelectionMargin)
						}
					}
				}
				// Greedy continuation from scratch.
				st.Reset()
				st.OnRoute = nil
				logits, err = st.Forward(ctx, pr.TokenIDs, false)
				if err != nil {
					t.Fatal(err)
				}
				// Free-run 32 greedy steps; tokens must match up to the first
				// step whose reference margin is below the tolerance.
				limit := len(pr.Greedy.TokenIDs)
				for i := range pr.Greedy.Top5 {
					if pr.Greedy.Top5[i].Margin < tc.tol.greedyMarg {
						limit = i
						break
					}
				}
				matched := -1
				for i, want := range pr.Greedy.TokenIDs {
					id := sample.Argmax(logits)
					if id != want {
						matched = i
						break
					}
					if logits, err = st.Forward(ctx, []int{id}, false); err != nil {
						t.Fatal(err)
					}
				}
				if matched < 0 {
					matched = len(pr.Greedy.TokenIDs)
				}
				if matched < limit {
					t.Errorf("prompt %d: greedy diverges at step %d, before the first low-margin step %d (ref margin there %.3g)", pi, matched, limit, pr.Greedy.Top5[matched].Margin)
				}
				t.Logf("%s prompt %d (%d tokens): greedy prefix %d/%d matched (required %d: steps before the first ref margin < %g)", tc.name, pi, len(pr.TokenIDs), matched, len(pr.Greedy.TokenIDs), limit, tc.tol.greedyMarg)
			}
			t.Logf("%s: max |Δlogit| %.3g, min cosine %.7f; routing %d sets compared, %d differ, %d skipped (margin < %g, of which %d differ)", tc.name, worst, worstCos, routed, diffs, skipped, tc.tol.routeMargin, skippedDiff)
		})
	}
}
