package model

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/lesfarm/lesfarm/runtime/expert"
	"github.com/lesfarm/lesfarm/runtime/gguf"
	"github.com/lesfarm/lesfarm/runtime/moe"
	"github.com/lesfarm/lesfarm/runtime/pack"
	"github.com/lesfarm/lesfarm/runtime/sample"
	"github.com/lesfarm/lesfarm/runtime/tensor"
)

// qwen35Greedy decodes n greedy tokens after prompt and, at every step,
// runs the MTP block as a drafter would (token + the target's hidden
// state), returning the target's tokens and the MTP argmaxes. Both must be
// identical whatever serves the experts.
func qwen35Greedy(t *testing.T, m *Model, prompt []int, n int) (toks, drafts []int) {
	t.Helper()
	ctx := context.Background()
	st, err := m.NewState(len(prompt) + n + 1)
	if err != nil {
		t.Fatal(err)
	}
	d, err := m.NewMTP(len(prompt) + n + 1)
	if err != nil {
		t.Fatal(err)
	}
	logits, err := st.Forward(ctx, prompt, false)
	if err != nil {
		t.Fatal(err)
	}
	last := len(prompt) - 1
	for range n {
		id := sample.Argmax(logits)
		toks = append(toks, id)
		// MTP at position last+1 takes the new token and h at last.
		if d.Pos() == 0 {
			// Catch the drafter up on the prompt (h at p−1, zeros at 0).
			H := m.Hidden
			hid := make([]float32, len(prompt)*H)
			// Recompute the prompt hidden states from a fresh state.
			ps, _ := m.NewState(len(prompt))
			if _, err := ps.Forward(ctx, prompt, true); err != nil {
				t.Fatal(err)
			}
			for p := 1; p < len(prompt); p++ {
				copy(hid[p*H:], ps.OutputHidden(p-1))
			}
			if _, err := d.Forward(ctx, prompt, hid, false); err != nil {
				t.Fatal(err)
			}
		}
		dl, err := d.Forward(ctx, []int{id}, st.OutputHidden(last), false)
		if err != nil {
			t.Fatal(err)
		}
		drafts = append(drafts, sample.Argmax(dl))
		if logits, err = st.Forward(ctx, []int{id}, false); err != nil {
			t.Fatal(err)
		}
		last++
	}
	return toks, drafts
}

// fineGrainedQwen35File writes a small qwen35moe with fine-grained-moe
// routing (synth_routing.go) and returns its path.
func fineGrainedQwen35File(t *testing.T) string {
	t.Helper()
	c := SynthConfig{Arch: "qwen35moe", Layers: 4, Experts: 8, ExpertsUsed: 2, Hidden: 256, ExpertFFN: 64, Heads: 4, KVHeads: 2,
		Vocab: 512, Context: 256, Type: tensor.Q8_0, Seed: 7, Routing: RoutingFineGrained}
	path := filepath.Join(t.TempDir(), "fine.gguf")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteSynthetic(f, c); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestQwen35ModesMatchResident is the LES exactness contract on qwen35moe:
// every store mode, at a quarter of the experts and at a one-expert budget,
// on the unpacked and packed file, gives the all-resident greedy tokens and
// MTP drafts, never holds more than its budget, and really streams (the
// MTP block's experts included). It runs on the repo's own tiny F32 and
// Q4_K models, and on the shared fixtures when present.
func TestQwen35ModesMatchResident(t *testing.T) {
	models := map[string]string{
		"tiny-f32":                tinyQwen35File(t, defaultTinyQwen35(tensor.F32)),
		"tiny-q4_k":               tinyQwen35File(t, defaultTinyQwen35(tensor.Q4_K)),
		"synth-fine-grained-q8_0": fineGrainedQwen35File(t),
	}
	for _, v := range []string{"f32", "q4_k_m"} {
		if p := filepath.Join(sharedTestdata(t), "qwen35moe", "tiny-qwen35moe-"+v+".gguf"); fileExists(p) {
			models["shared-"+v] = p
		}
	}
	prompt := []int{464, 2068, 7586, 21831 % 4096, 3, 9}
	const n = 10
	for name, path := range models {
		t.Run(name, func(t *testing.T) {
			base, err := Load(path, Options{Threads: 1})
			if err != nil {
				t.Fatal(err)
			}
			pr := slices.Clone(prompt)
			for i := range pr {
				pr[i] %= base.Vocab
			}
			want, wantDraft := qwen35Greedy(t, base, pr, n)
			base.Close()
			packed := filepath.Join(t.TempDir(), "packed.gguf")
			packErr := pack.Pack(context.Background(), path, packed, pack.Options{})
			if packErr != nil {
				t.Logf("pack: %v (packed variants skipped)", packErr)
			}
			// Record the routing for the oracle with an unconstrained run.
			var rec *expert.Store
			m, err := Load(path, Options{Threads: 1, Experts: qwen35Store(path, "", expert.Options{Mode: expert.OnDemandParallel, Record: true}, 1, &rec, new(int64))})
			if err != nil {
				t.Fatal(err)
			}
			if got, gd := qwen35Greedy(t, m, pr, n); !slices.Equal(got, want) || !slices.Equal(gd, wantDraft) {
				t.Fatalf("recording run: %v / %v, want %v / %v", got, gd, want, wantDraft)
			}
			m.Close()
			tr := rec.Meter().Recorded()
			for _, expertsPath := range []string{"", packed} {
				if expertsPath != "" && packErr != nil {
					continue
				}
				for _, mode := range []expert.Mode{expert.OnDemand, expert.OnDemandParallel, expert.Lookahead, expert.Scheduled, expert.OracleMode} {
					for _, frac := range []float64{0.25, 0} {
						label := fmt.Sprintf("%s/packed=%v/budget=%.2f", mode, expertsPath != "", frac)
						if frac == 0 {
							label = fmt.Sprintf("%s/packed=%v/budget=one-expert", mode, expertsPath != "")
						}
						t.Run(label, func(t *testing.T) {
							var s *expert.Store
							var budget int64
							opts := expert.Options{Mode: mode, Trace: tr, Workers: 4}
							m, err := Load(path, Options{Threads: 1, Experts: qwen35Store(path, expertsPath, opts, frac, &s, &budget)})
							if err != nil {
								t.Fatal(err)
							}
							defer m.Close()
							got, gd := qwen35Greedy(t, m, pr, n)
							if !slices.Equal(got, want) || !slices.Equal(gd, wantDraft) {
								t.Fatalf("tokens %v drafts %v, want all-resident %v %v", got, gd, want, wantDraft)
							}
							st := s.Meter().Stats()
							if st.Misses == 0 || st.Reads == 0 {
								t.Fatalf("no expert was read (stats %+v)", st)
							}
							if st.PeakBytes > budget {
								t.Fatalf("store held %d bytes, budget %d", st.PeakBytes, budget)
							}
							if ls := s.Meter().Layer(len(m.Layers)); ls.Hits+ls.Misses == 0 {
								t.Fatalf("the MTP block's experts (layer %d) never went through the store", len(m.Layers))
							}
						})
					}
				}
			}
		})
	}
}

// qwen35Store opens an expert store for a model being loaded: a budget of
// frac of all experts, or of the largest single expert when frac is 0.
func qwen35Store(path, expertsPath string, opts expert.Options, frac float64, out **expert.Store, budget *int64) func(*gguf.File, []moe.LayerShape) (moe.Source, error) {
	return func(f *gguf.File, shapes []moe.LayerShape) (moe.Source, error) {
		var total, one int64
		for _, s := range shapes {
			total += int64(s.Experts) * s.Bytes()
			one = max(one, s.Bytes())
		}
		opts.Budget = int64(float64(total) * frac)
		if frac == 0 {
			probe, err := expert.Open(path, f, shapes, expertsPath, expert.Options{Budget: total * 2})
			if err != nil {
				return nil, err
			}
			one = 0
			for l := range shapes {
				one = max(one, probe.Info().ExpertBytes[l])
			}
			probe.Close()
			opts.Budget = one
		}
		*budget = opts.Budget
		s, err := expert.Open(path, f, shapes, expertsPath, opts)
		*out = s
		return s, err
	}
}

// TestQwen35ScaledShapeModesMatchResident (LESFARM_FULL=1; writes a 1.4 GB
// model): the exactness contract on the published 35B-A3B per-layer
// geometry — hidden 2048, 256 routed experts of width 512 with top-8, a
// 512-wide shared expert, DeltaNet 16 k-heads / 32 v-heads of 128, 16/2
// attention heads of 256 with 64 rotary dims — scaled to one DeltaNet
// layer, one attention layer and the MTP block, Q4_K.
func TestQwen35ScaledShapeModesMatchResident(t *testing.T) {
	if os.Getenv("LESFARM_FULL") == "" {
		t.Skip("set LESFARM_FULL=1 to run the 35B-A3B-shaped exactness check (writes a 1.4 GB model)")
	}
	c := SynthPresets["qwen35moe-35b-a3b-scaled"]
	c.Layers, c.Qwen35.FullAttnInterval, c.Vocab, c.Context, c.Type, c.Seed = 2, 2, 4096, 512, tensor.Q4_K, 11
	path := filepath.Join(t.TempDir(), "q35-35b-a3b-shape.gguf")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteSynthetic(f, c); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	prompt := []int{11, 2048, 7, 300, 4000, 1}
	const n = 6
	base, err := Load(path, Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	want, wantDraft := qwen35Greedy(t, base, prompt, n)
	base.Close()
	var rec *expert.Store
	m, err := Load(path, Options{Threads: 2, Experts: qwen35Store(path, "", expert.Options{Mode: expert.OnDemandParallel, Record: true}, 1, &rec, new(int64))})
	if err != nil {
		t.Fatal(err)
	}
	if got, gd := qwen35Greedy(t, m, prompt, n); !slices.Equal(got, want) || !slices.Equal(gd, wantDraft) {
		t.Fatalf("recording run: %v / %v, want %v / %v", got, gd, want, wantDraft)
	}
	m.Close()
	tr := rec.Meter().Recorded()
	for _, mode := range []expert.Mode{expert.OnDemand, expert.OnDemandParallel, expert.Lookahead, expert.Scheduled, expert.OracleMode} {
		t.Run(mode.String(), func(t *testing.T) {
			var s *expert.Store
			var budget int64
			m, err := Load(path, Options{Threads: 2, Experts: qwen35Store(path, "", expert.Options{Mode: mode, Trace: tr, Workers: 8}, 0.1, &s, &budget)})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			got, gd := qwen35Greedy(t, m, prompt, n)
			if !slices.Equal(got, want) || !slices.Equal(gd, wantDraft) {
				t.Fatalf("tokens %v drafts %v, want all-resident %v %v", got, gd, want, wantDraft)
			}
			st := s.Meter().Stats()
			if st.PeakBytes > budget || st.Misses == 0 {
				t.Fatalf("peak %d of budget %d, %d misses", st.PeakBytes, budget, st.Misses)
			}
			t.Logf("%s at 10%%: hit rate %.3f, %d reads, %.1f MB read, recall %.3f", mode, st.HitRate(), st.Reads, float64(st.BytesRead)/1e6, st.Prediction().Recall())
		})
	}
}
