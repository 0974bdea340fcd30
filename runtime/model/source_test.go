package model

import (
	"context"
	"math"
	"slices"
	"testing"

	"github.com/lesfarm/lesfarm/runtime/gguf"
	"github.com/lesfarm/lesfarm/runtime/moe"
	"github.com/lesfarm/lesfarm/runtime/trace"
)

// shuffledSource serves resident experts in reverse order, asks for
// lookahead predictions and records them, so tests can check that the
// order of Use does not change a bit and measure the predictor's recall.
type shuffledSource struct {
	res      *moe.Resident
	k        int
	predict  map[int][]int // layer -> last prediction
	recall   []float64     // per layer: sum of |pred ∩ true| / |true| per step
	steps    []int
	prefetch int
}

func (s *shuffledSource) PredictK() int { return s.k }

func (s *shuffledSource) Prefetch(layer int, experts []int) {
	s.prefetch++
	s.predict[layer] = slices.Clone(experts)
}

func (s *shuffledSource) Use(ctx context.Context, layer int, experts []int, fn func(int, moe.Weights) error) error {
	if p, ok := s.predict[layer]; ok {
		hit := 0
		for _, e := range experts {
			if slices.Contains(p, e) {
				hit++
			}
		}
		s.recall[layer] += float64(hit) / float64(len(experts))
		s.steps[layer]++
		delete(s.predict, layer)
	}
	for i := len(experts) - 1; i >= 0; i-- {
		if err := fn(i, s.res.Data[layer][experts[i]]); err != nil {
			return err
		}
	}
	return nil
}

type countingSink struct{ layers, tokens int }

func (c *countingSink) Token(*trace.TokenEvent) { c.tokens++ }
func (c *countingSink) Layer(ev *trace.LayerEvent) {
	c.layers++
	if !slices.IsSorted(ev.Selected) {
		panic("Selected not ascending")
	}
}
func (c *countingSink) Read(*trace.ReadEvent) {}

// TestSourceOrderAndLookahead loads the trained MoE twice, once resident and
// once through a factory whose source hands experts out in reverse order and
// requests 4 predicted experts per token. Logits must be bit-identical, and
// the prev_layer_post_attn predictor's per-layer recall on single-token
// decoding must be in the range routing-stats.json reports (layer 1 ≈ 0.31,
// layers 2–5 ≈ 0.63–0.83 at K=4).
func TestSourceOrderAndLookahead(t *testing.T) {
	path := fixture(t, "trained/tiny-moe-kjv-f16.gguf")
	var ref struct {
		Val []int `json:"validation_txt_token_ids"`
	}
	readJSON(t, fixture(t, "trained/ref.json"), &ref)
	base, err := Load(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer base.Close()
	var src *shuffledSource
	factoryCalled := false
	m, err := Load(path, Options{Experts: func(f *gguf.File, shapes []moe.LayerShape) (moe.Source, error) {
		factoryCalled = true
		if len(shapes) != 6 || shapes[0].Experts != 32 || shapes[0].Bytes() != 147456 {
			t.Errorf("shapes = %+v", shapes[0])
		}
		src = &shuffledSource{res: base.Experts.(*moe.Resident), k: 4, predict: map[int][]int{},
			recall: make([]float64, len(shapes)), steps: make([]int, len(shapes))}
		return src, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if !factoryCalled {
		t.Fatal("expert factory not called")
	}
	if m.Experts != moe.Source(src) {
		t.Fatalf("model uses %T, not the factory's source", m.Experts)
	}
	ctx := context.Background()
	n := min(len(ref.Val), 200)
	toks := ref.Val[:n]
	a, _ := base.NewState(n)
	b, _ := m.NewState(n)
	sink := &countingSink{}
	b.Sink = sink
	// Batched prefill of the first 8 tokens, then single-token steps.
	la, err := a.Forward(ctx, toks[:8], true)
	if err != nil {
		t.Fatal(err)
	}
	lb, err := b.Forward(ctx, toks[:8], true)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(la, lb) {
		t.Fatal("batched logits differ between resident and reversed source")
	}
	clear(src.recall)
	clear(src.steps)
	for _, tok := range toks[8:] {
		la, err = a.Forward(ctx, []int{tok}, false)
		if err != nil {
			t.Fatal(err)
		}
		lb, err = b.Forward(ctx, []int{tok}, false)
		if err != nil {
			t.Fatal(err)
		}
		for i := range la {
			if math.Float32bits(la[i]) != math.Float32bits(lb[i]) {
				t.Fatalf("decode logits differ at %d: %v vs %v", i, la[i], lb[i])
			}
		}
	}
	if sink.layers != 6*(n-8+1) {
		t.Errorf("got %d layer events, want %d", sink.layers, 6*(n-8+1))
	}
	// routing-stats.json prev_layer_post_attn recall@4 (layers 1..5):
	// 0.310, 0.630, 0.751, 0.827, 0.733. Layer 0 is predicted from the
	// embedding (prev_layer_output[0] = 0.875).
	want := []float64{0.875, 0.310, 0.630, 0.751, 0.827, 0.733}
	for l := range src.recall {
		r := src.recall[l] / float64(src.steps[l])
		t.Logf("layer %d: lookahead recall@4 %.3f over %d steps (routing-stats %.3f)", l, r, src.steps[l], want[l])
		if math.Abs(r-want[l]) > 0.15 {
			t.Errorf("layer %d: recall %.3f far from routing-stats %.3f", l, r, want[l])
		}
	}
}
