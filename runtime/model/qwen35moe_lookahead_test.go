package model

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/lesfarm/lesfarm/runtime/gguf"
	"github.com/lesfarm/lesfarm/runtime/moe"
)

// predictRecorder serves resident experts and records the lookahead
// predictions the model makes for each layer of the current position.
type predictRecorder struct {
	res  *moe.Resident
	k    int
	pred map[int][]int
}

func (p *predictRecorder) PredictK() int { return p.k }
func (p *predictRecorder) Prefetch(layer int, experts []int) {
	p.pred[layer] = slices.Clone(experts)
}
func (p *predictRecorder) Use(ctx context.Context, layer int, experts []int, fn func(int, moe.Weights) error) error {
	return p.res.Use(ctx, layer, experts, fn)
}

// TestQwen35LookaheadRecall measures the lookahead predictor (layer l+1's
// post_attention_norm and router applied to layer l's post-attention
// residual; layer 0's to the embedding) per layer on the shared qwen35moe
// fixture, decoding every reference position one token at a time and
// scoring the predicted top-k against the reference's captured expert ids.
// The predictor must work across DeltaNet→attention and attention→DeltaNet
// boundaries: every layer's recall@4 must beat chance (4/16) clearly.
func TestQwen35LookaheadRecall(t *testing.T) {
	for _, tc := range qwen35Cases {
		t.Run(tc.name, func(t *testing.T) {
			path := fixture(t, tc.model)
			var ref qwen35Ref
			readJSON(t, fixture(t, tc.ref), &ref)
			base, err := Load(path, Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer base.Close()
			for _, k := range []int{4, 6} {
				var rec *predictRecorder
				m, err := Load(path, Options{Experts: func(f *gguf.File, shapes []moe.LayerShape) (moe.Source, error) {
					rec = &predictRecorder{res: base.Experts.(*moe.Resident), k: k, pred: map[int][]int{}}
					return rec, nil
				}})
				if err != nil {
					t.Fatal(err)
				}
				L := len(m.Layers)
				hits, total := make([]int, L), make([]int, L)
				ctx := context.Background()
				for _, pr := range ref.Prompts {
					st, err := m.NewState(0)
					if err != nil {
						t.Fatal(err)
					}
					seq := pr.MTP.Sequence // prompt + greedy tokens 1–4: the captured positions
					for pos, id := range seq {
						clear(rec.pred)
						if _, err := st.Forward(ctx, []int{id}, false); err != nil {
							t.Fatal(err)
						}
						if pos >= len(pr.Positions) || pr.Positions[pos].Pos != pos {
							continue
						}
						for l, lr := range pr.Positions[pos].Layers {
							for _, e := range lr.ExpertIDs {
								if slices.Contains(rec.pred[l], e) {
									hits[l]++
								}
							}
							total[l] += len(lr.ExpertIDs)
						}
					}
				}
				m.Close()
				var line []string
				for l := range L {
					r := float64(hits[l]) / float64(total[l])
					kind := "deltanet"
					if !m.q35().layers[l].recurrent {
						kind = "attention"
					}
					line = append(line, fmt.Sprintf("L%d(%s) %.3f", l, kind, r))
					if k == 4 && r < 0.6 {
						t.Errorf("layer %d (%s): lookahead recall@4 %.3f, barely above chance 0.25", l, kind, r)
					}
				}
				t.Logf("%s recall@%d vs reference routing over %d positions: %s", tc.name, k, total[0]/4, strings.Join(line, ", "))
			}
		})
	}
}
