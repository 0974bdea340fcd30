package model

import (
	"context"
	"os"

	"math"
	"slices"
	"testing"

	"github.com/lesfarm/lesfarm/runtime/sample"
	"github.com/lesfarm/lesfarm/runtime/tokenizer"
)

// trainedRef is the subset of ../shared/testdata/trained/ref.json we use.
type trainedRef struct {
	Validation []int           `json:"validation_txt_token_ids"`
	MoE        trainedModelRef `json:"moe"`
	Draft      trainedModelRef `json:"draft"`
}

type trainedModelRef struct {
	File    string `json:"file"`
	Prompts []struct {
		Prompt    string `json:"prompt"`
		PromptIDs []int  `json:"prompt_ids"`
		GreedyIDs []int  `json:"greedy_ids"`
		Top20     []struct {
			ID    int     `json:"id"`
			Logit float64 `json:"logit"`
		} `json:"last_position_top20"`
	} `json:"prompts"`
	Routing *struct {
		PromptIDs []int `json:"prompt_ids"`
		Layers    []struct {
			Layer int     `json:"layer"`
			IDs   [][]int `json:"llama_cpp_topk_ids"`
		} `json:"layers"`
	} `json:"routing_reference"`
}

// TestTrainedConformance checks the trained MoE (F16 weights) and the dense
// qwen3 draft (F32) against llama.cpp. Tolerances: the draft is F32 and gets
// issue 3's 1e-3; the MoE's F16 matrix products round activations to F16
// exactly as llama.cpp does, so the same 1e-3 applies (the README's 1e-2 is
// for implementations that do not round). Greedy must match all 32 tokens:
// the top-20 lists show top-1/top-2 gaps far above either tolerance.
func TestTrainedConformance(t *testing.T) {
	var ref trainedRef
	readJSON(t, fixture(t, "trained/ref.json"), &ref)
	for _, tc := range []struct {
		name string
		r    trainedModelRef
		tol  float64
	}{
		{"moe", ref.MoE, 1e-3},
		{"draft", ref.Draft, 1e-3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m, err := Load(fixture(t, "trained/"+tc.r.File), Options{Threads: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			ctx := context.Background()
			st, err := m.NewState(0)
			if err != nil {
				t.Fatal(err)
			}
			tok, err := tokenizer.FromGGUF(m.File)
			if err != nil {
				t.Fatal(err)
			}
			if tc.name == "moe" {
				val, err := os.ReadFile(fixture(t, "trained/validation.txt"))
				if err != nil {
					t.Fatal(err)
				}
				if got := tok.Tokenize(string(val), true, false); !slices.Equal(got, ref.Validation) {
					t.Errorf("validation.txt: %d tokens, ref %d; first difference at %d", len(got), len(ref.Validation), firstDiff(got, ref.Validation))
				}
			}
			worst := 0.0
			for pi, pr := range tc.r.Prompts {
				if got := tok.Tokenize(pr.Prompt, true, false); !slices.Equal(got, pr.PromptIDs) {
					t.Errorf("prompt %d %q: tokens %v, ref %v", pi, pr.Prompt, got, pr.PromptIDs)
				}
				st.Reset()
				logits, err := st.Forward(ctx, pr.PromptIDs, false)
				if err != nil {
					t.Fatal(err)
				}
				for _, e := range pr.Top20 {
					d := math.Abs(float64(logits[e.ID]) - e.Logit)
					worst = max(worst, d)
					if d > tc.tol {
						t.Errorf("prompt %d: logit of %d is %.6f, ref %.6f (|Δ| %.3g > %g)", pi, e.ID, logits[e.ID], e.Logit, d, tc.tol)
					}
				}
				matched := 0
				for i, want := range pr.GreedyIDs {
					id := sample.Argmax(logits)
					if id != want {
						t.Errorf("prompt %d: greedy step %d is %d, ref %d", pi, i, id, want)
						break
					}
					matched++
					if logits, err = st.Forward(ctx, []int{id}, false); err != nil {
						t.Fatal(err)
					}
				}
				t.Logf("%s prompt %d %q: greedy %d/%d", tc.name, pi, pr.Prompt, matched, len(pr.GreedyIDs))
			}
			t.Logf("%s: max |Δlogit| over the top-20 at the last prompt position: %.3g", tc.name, worst)
			if tc.r.Routing == nil {
				return
			}
			rr := tc.r.Routing
			got := map[[2]int][]int{}
			st.Reset()
			st.OnRoute = func(pos, layer int, experts []int, _ []float32) {
				got[[2]int{pos, layer}] = slices.Sorted(slices.Values(experts))
			}
			if _, err := st.Forward(ctx, rr.PromptIDs, false); err != nil {
				t.Fatal(err)
			}
			n, diff := 0, 0
			for _, l := range rr.Layers {
				// llama.cpp computes the last layer for the last token only.
				first := len(rr.PromptIDs) - len(l.IDs)
				for j, ids := range l.IDs {
					n++
					g := got[[2]int{first + j, l.Layer}]
					if w := slices.Sorted(slices.Values(ids)); !slices.Equal(g, w) {
						diff++
						t.Errorf("routing_reference token %d layer %d: experts %v, llama.cpp %v", first+j, l.Layer, g, w)
					}
				}
			}
			t.Logf("%s: routing_reference %d sets compared, %d differ", tc.name, n, diff)
		})
	}
}

func firstDiff(a, b []int) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
