package model

import (
	"context"
	"math"
	"slices"
	"testing"

	"github.com/lesfarm/lesfarm/runtime/sample"
	"github.com/lesfarm/lesfarm/runtime/tokenizer"
)

// qwen35Ref is the subset of a qwen35moe *.ref.json the tests use (see
// ../shared/testdata/qwen35moe/README.md).
type qwen35Ref struct {
	NVocab              int   `json:"n_vocab"`
	NLayer              int   `json:"n_layer"`
	RecurrentLayers     []int `json:"recurrent_layers"`
	FullAttentionLayers []int `json:"full_attention_layers"`
	Perplexity          struct {
		TokenIDs []int     `json:"token_ids"`
		MeanNLL  float64   `json:"mean_nll"`
		PPL      float64   `json:"ppl"`
		TokenNLL []float64 `json:"token_nll"`
	} `json:"perplexity"`
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
			Pos    int `json:"pos"`
			Layers []struct {
				ExpertIDs        []int     `json:"expert_ids"`
				RouterProbs      []float32 `json:"router_probs"`
				SelectionMargin  float64   `json:"selection_margin"`
				SharedExpertGate float32   `json:"shared_expert_gate"`
				GDNBeta          []float32 `json:"gdn_beta"`
				GDNG             []float32 `json:"gdn_g"`
				AttnResidualRMS  float64   `json:"attn_residual_rms"`
				LOutRMS          float64   `json:"l_out_rms"`
			} `json:"layers"`
		} `json:"positions"`
		MTP struct {
			Sequence  []int `json:"sequence_token_ids"`
			Positions []struct {
				Pos        int       `json:"pos"`
				Input      int       `json:"input_token_id"`
				HFrom      *int      `json:"h_from_pos"`
				Argmax     int       `json:"argmax"`
				Top5IDs    []int     `json:"top5_ids"`
				Top5Logits []float32 `json:"top5_logits"`
			} `json:"positions"`
			Logits []struct {
				Position int       `json:"position"`
				HFrom    int       `json:"h_from_pos"`
				Values   []float32 `json:"values"`
			} `json:"logits"`
		} `json:"mtp"`
	} `json:"prompts"`
}

// qwen35Cases are the shared qwen35moe fixtures and the tolerances.
// F32: max |Δlogit| 1e-4 and all 32 greedy tokens (the smallest reference
// margin, 1.1e-3, is far above our error). Q4_K_M, with activations
// quantized to Q8_K / Q8_0 as ggml does (the tensor kernels always do):
// max |Δlogit| 0.3, routing sets equal where selection_margin >= 5e-3,
// greedy equal up to the first step whose reference margin is below 0.1.
var qwen35Cases = []struct {
	name, model, ref string
	tol              tolerances
	probe            float64 // per-layer intermediates (RMS relative)
}{
	{"f32", "qwen35moe/tiny-qwen35moe-f32.gguf", "qwen35moe/tiny-qwen35moe-f32.ref.json", tolerances{1e-4, 2, 0, 0}, 1e-5},
	{"q4_k_m", "qwen35moe/tiny-qwen35moe-q4_k_m.gguf", "qwen35moe/tiny-qwen35moe-q4_k_m.ref.json", tolerances{0.3, 2, 5e-3, 0.1}, 0.1},
}

func TestQwen35Conformance(t *testing.T) {
	for _, tc := range qwen35Cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := fixture(t, tc.model)
			var ref qwen35Ref
			readJSON(t, fixture(t, tc.ref), &ref)
			m, err := Load(path, Options{Threads: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			if m.Vocab != ref.NVocab || len(m.Layers) != ref.NLayer || !m.HasMTP() {
				t.Fatalf("model has vocab %d, %d layers, MTP %v; ref says %d, %d, MTP", m.Vocab, len(m.Layers), m.HasMTP(), ref.NVocab, ref.NLayer)
			}
			for _, l := range ref.RecurrentLayers {
				if !m.q35().layers[l].recurrent {
					t.Errorf("layer %d should be a DeltaNet layer", l)
				}
			}
			for _, l := range ref.FullAttentionLayers {
				if m.q35().layers[l].recurrent {
					t.Errorf("layer %d should be a full-attention layer", l)
				}
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
			ctx := context.Background()
			worstProbe := map[string]float64{}
			worst, worstCos := 0.0, 1.0
			routed, skipped, diffs := 0, 0, 0
			for pi, pr := range ref.Prompts {
				type key struct{ pos, layer int }
				got := map[key][]int{}
				st, err := m.NewState(0)
				if err != nil {
					t.Fatal(err)
				}
				st.OnRoute = func(pos, layer int, experts []int, _ []float32) {
					got[key{pos, layer}] = slices.Clone(experts)
				}
				type pkey struct {
					pos, layer int
					kind       probeKind
				}
				probed := map[pkey][]float32{}
				st.hybrid().probe = func(pos, layer int, kind probeKind, vals []float32) {
					probed[pkey{pos, layer, kind}] = slices.Clone(vals)
				}
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
						t.Errorf("prompt %d pos %d: max |Δlogit| %.3g (tol %g), cosine %.6f", pi, lg.Position, d, tc.tol.maxAbsLogit, c)
					}
				}
				// Per-layer intermediates: shared-expert gate, DeltaNet β and g,
				// and the residual stream's RMS after each half of the block.
				for _, p := range pr.Positions {
					for l, lr := range p.Layers {
						diff := func(what string, got, want float64) {
							d := math.Abs(got - want)
							if what == "rms" {
								d /= max(want, 1e-6)
							}
							worstProbe[what] = max(worstProbe[what], d)
							if d > tc.probe {
								t.Errorf("prompt %d pos %d layer %d: %s %.7g, ref %.7g", pi, p.Pos, l, what, got, want)
							}
						}
						diff("shared_gate", float64(probed[pkey{p.Pos, l, probeSharedGate}][0]), float64(lr.SharedExpertGate))
						diff("rms", rms(probed[pkey{p.Pos, l, probeAttnResidual}]), lr.AttnResidualRMS)
						diff("rms", rms(probed[pkey{p.Pos, l, probeLayerOut}]), lr.LOutRMS)
						if bg := probed[pkey{p.Pos, l, probeBetaG}]; lr.GDNBeta != nil {
							vh := len(lr.GDNBeta)
							if len(bg) != 2*vh {
								t.Fatalf("prompt %d pos %d layer %d: no DeltaNet gates captured", pi, p.Pos, l)
							}
							for h := range vh {
								diff("beta", float64(bg[h]), float64(lr.GDNBeta[h]))
								diff("g", float64(bg[vh+h]), float64(lr.GDNG[h]))
							}
						}
					}
				}
				st.hybrid().probe = nil
				for _, p := range pr.Positions {
					for l, lr := range p.Layers {
						g, ok := got[key{p.Pos, l}]
						if !ok {
							t.Fatalf("prompt %d: no routing captured at pos %d layer %d", pi, p.Pos, l)
						}
						if lr.SelectionMargin < tc.tol.routeMargin {
							skipped++
							continue
						}
						routed++
						a, b := slices.Sorted(slices.Values(g)), slices.Sorted(slices.Values(lr.ExpertIDs))
						if !slices.Equal(a, b) {
							diffs++
							t.Errorf("prompt %d pos %d layer %d: experts %v, ref %v (margin %.2g)", pi, p.Pos, l, g, lr.ExpertIDs, lr.SelectionMargin)
						}
					}
				}
				st.Reset()
				st.OnRoute = nil
				if logits, err = st.Forward(ctx, pr.TokenIDs, false); err != nil {
					t.Fatal(err)
				}
				limit := len(pr.Greedy.TokenIDs)
				for i := range pr.Greedy.Top5 {
					if pr.Greedy.Top5[i].Margin < tc.tol.greedyMarg {
						limit = i
						break
					}
				}
				matched := len(pr.Greedy.TokenIDs)
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
				if matched < limit {
					t.Errorf("prompt %d: greedy diverges at step %d, before the first low-margin step %d", pi, matched, limit)
				}
				t.Logf("%s prompt %d (%d tokens): greedy %d/%d matched (required %d)", tc.name, pi, len(pr.TokenIDs), matched, len(pr.Greedy.TokenIDs), limit)
			}
			t.Logf("%s: per-layer max |Δ| (rms relative): %v", tc.name, worstProbe)
			t.Logf("%s: max |Δlogit| %.3g, min cosine %.7f; routing %d sets compared, %d differ, %d skipped (margin < %g)", tc.name, worst, worstCos, routed, diffs, skipped, tc.tol.routeMargin)

			// Perplexity as llama.cpp computed it: one batch with logits at
			// every position, mean NLL of x_{p+1}.
			pp := ref.Perplexity
			st, err := m.NewState(len(pp.TokenIDs))
			if err != nil {
				t.Fatal(err)
			}
			all, err := st.Forward(ctx, pp.TokenIDs, true)
			if err != nil {
				t.Fatal(err)
			}
			var sum, worstTok float64
			for p := 0; p+1 < len(pp.TokenIDs); p++ {
				nll := nllOf(all[p*m.Vocab:(p+1)*m.Vocab], pp.TokenIDs[p+1])
				sum += nll
				if p < len(pp.TokenNLL) {
					worstTok = max(worstTok, math.Abs(nll-pp.TokenNLL[p]))
				}
			}
			mean := sum / float64(len(pp.TokenIDs)-1)
			if d := math.Abs(mean - pp.MeanNLL); d > tc.tol.maxAbsLogit {
				t.Errorf("perplexity: mean NLL %.6f, ref %.6f (|Δ| %.3g > %g)", mean, pp.MeanNLL, d, tc.tol.maxAbsLogit)
			}
			t.Logf("%s perplexity: %.1f (ref %.1f), mean NLL |Δ| %.3g, worst token |Δ| %.3g", tc.name, math.Exp(mean), pp.PPL, math.Abs(mean-pp.MeanNLL), worstTok)
		})
	}
}

// TestQwen35MTPConformance runs the NextN block the way the reference
// driver did: the target decodes prompt + greedy tokens 1–4 in one batch,
// then the MTP block takes token x_p with the target's h_nextn at p−1
// (zeros at p = 0). Every position's top-5 logits (and, for F32, the full
// vector at greedy token 1) must be within the variant's tolerance, and
// the argmax equal wherever the reference top-2 gap exceeds twice it. A
// token-by-token MTP decode must give the same logits as the batch.
func TestQwen35MTPConformance(t *testing.T) {
	for _, tc := range qwen35Cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := fixture(t, tc.model)
			var ref qwen35Ref
			readJSON(t, fixture(t, tc.ref), &ref)
			m, err := Load(path, Options{Threads: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			ctx := context.Background()
			H := m.Hidden
			worst, worstFull, worstStep := 0.0, 0.0, 0.0
			checked := 0
			for pi, pr := range ref.Prompts {
				seq := pr.MTP.Sequence
				st, err := m.NewState(0)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := st.Forward(ctx, seq, true); err != nil {
					t.Fatal(err)
				}
				hidden := make([]float32, len(seq)*H)
				for p := 1; p < len(seq); p++ {
					copy(hidden[p*H:], st.OutputHidden(p-1))
				}
				d, err := m.NewMTP(0)
				if err != nil {
					t.Fatal(err)
				}
				logits, err := d.Forward(ctx, seq, hidden, true)
				if err != nil {
					t.Fatal(err)
				}
				all := slices.Clone(logits)
				V := m.Vocab
				for _, rp := range pr.MTP.Positions {
					got := all[rp.Pos*V : (rp.Pos+1)*V]
					if rp.Input != seq[rp.Pos] || (rp.Pos == 0) != (rp.HFrom == nil) {
						t.Fatalf("prompt %d: MTP ref position %d does not fit the sequence", pi, rp.Pos)
					}
					for j, id := range rp.Top5IDs {
						dd := float64(got[id] - rp.Top5Logits[j])
						worst = max(worst, max(dd, -dd))
						if max(dd, -dd) > tc.tol.maxAbsLogit {
							t.Errorf("prompt %d MTP pos %d: logit[%d] %.6g, ref %.6g", pi, rp.Pos, id, got[id], rp.Top5Logits[j])
						}
					}
					if gap := float64(rp.Top5Logits[0] - rp.Top5Logits[1]); gap > 2*tc.tol.maxAbsLogit {
						checked++
						if a := sample.Argmax(got); a != rp.Argmax {
							t.Errorf("prompt %d MTP pos %d: argmax %d, ref %d (gap %.3g)", pi, rp.Pos, a, rp.Argmax, gap)
						}
					}
				}
				for _, fl := range pr.MTP.Logits {
					dd, _ := compareLogits(all[fl.Position*V:(fl.Position+1)*V], fl.Values)
					worstFull = max(worstFull, dd)
					if dd > tc.tol.maxAbsLogit {
						t.Errorf("prompt %d MTP pos %d: full-vector max |Δlogit| %.3g (tol %g)", pi, fl.Position, dd, tc.tol.maxAbsLogit)
					}
				}
				// Token by token, as a drafter runs it.
				d.Reset()
				for p := range seq {
					var h []float32
					if p > 0 {
						h = hidden[p*H : (p+1)*H]
					}
					one, err := d.Forward(ctx, seq[p:p+1], h, false)
					if err != nil {
						t.Fatal(err)
					}
					dd, _ := compareLogits(one, all[p*V:(p+1)*V])
					worstStep = max(worstStep, dd)
				}
			}
			if worstStep > 1e-4 {
				t.Errorf("token-by-token MTP logits differ from the batch by %.3g", worstStep)
			}
			t.Logf("%s MTP: top-5 max |Δlogit| %.3g, full-vector %.3g, %d argmaxes compared; step vs batch %.3g", tc.name, worst, worstFull, checked, worstStep)
		})
	}
}

// nllOf returns −log softmax(logits)[target] in float64.
func nllOf(logits []float32, target int) float64 {
	mx := math.Inf(-1)
	for _, v := range logits {
		mx = max(mx, float64(v))
	}
	var sum float64
	for _, v := range logits {
		sum += math.Exp(float64(v) - mx)
	}
	return math.Log(sum) + mx - float64(logits[target])
}

func rms(x []float32) float64 {
	var s float64
	for _, v := range x {
		s += float64(v) * float64(v)
	}
	return math.Sqrt(s / float64(max(len(x), 1)))
}
