package spec

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/lesfarm/lesfarm/runtime/expert"
	"github.com/lesfarm/lesfarm/runtime/gguf"
	"github.com/lesfarm/lesfarm/runtime/model"
	"github.com/lesfarm/lesfarm/runtime/moe"
	"github.com/lesfarm/lesfarm/runtime/tokenizer"
)

const (
	trainedMoE   = "trained/tiny-moe-kjv-f16.gguf"
	trainedDraft = "trained/tiny-draft-kjv-f32.gguf"
)

// loadTrained loads a shared fixture model; src nil keeps experts resident.
func loadTrained(t testing.TB, rel string, src func(*gguf.File, []moe.LayerShape) (moe.Source, error)) *model.Model {
	t.Helper()
	m, err := model.Load(sharedTestdata(t, rel), model.Options{Threads: 1, Experts: src})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// scheduledStore opens the LES store in scheduled mode at budgetFrac of
// the expert bytes and hands it out.
func scheduledStore(path string, budgetFrac float64, out **expert.Store) func(*gguf.File, []moe.LayerShape) (moe.Source, error) {
	return modeStore(path, expert.Scheduled, budgetFrac, out)
}

// modeStore opens the LES store in mode at budgetFrac of the expert bytes
// and hands it out.
func modeStore(path string, mode expert.Mode, budgetFrac float64, out **expert.Store) func(*gguf.File, []moe.LayerShape) (moe.Source, error) {
	return func(f *gguf.File, shapes []moe.LayerShape) (moe.Source, error) {
		var total int64
		for _, s := range shapes {
			total += int64(s.Experts) * s.Bytes()
		}
		s, err := expert.Open(path, f, shapes, "", expert.Options{Mode: mode, Budget: int64(budgetFrac * float64(total))})
		*out = s
		return s, err
	}
}

// validationPrompts tokenizes the lines of validation.txt and keeps the
// first n tokens of each (lines are long chapters and paragraphs).
func validationPrompts(t testing.TB, m *model.Model, n int) [][]int {
	t.Helper()
	b, err := os.ReadFile(sharedTestdata(t, "trained/validation.txt"))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.FromGGUF(m.File)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]int
	for line := range strings.Lines(string(b)) {
		if ids := tok.Tokenize(strings.TrimSpace(line), false, false); len(ids) > 0 {
			out = append(out, ids[:min(n, len(ids))])
		}
	}
	return out
}

// TestTrainedIdentical is the product promise on the trained MoE and its
// draft: for every validation.txt line and K in 1, 2, 4, 8, with experts
// resident and streamed through the LES store (scheduled, 25% budget),
// speculative decoding gives plain greedy's tokens.
func TestTrainedIdentical(t *testing.T) {
	target := loadTrained(t, trainedMoE, nil)
	draft := loadTrained(t, trainedDraft, nil)
	var store *expert.Store
	streamed := loadTrained(t, trainedMoE, scheduledStore(sharedTestdata(t, trainedMoE), 0.25, &store))
	prompts := validationPrompts(t, target, 16)
	gen := 24
	if os.Getenv("LESFARM_FULL") != "" {
		gen = 64
	}
	if len(prompts) < 10 {
		t.Fatalf("validation.txt gave %d prompts", len(prompts))
	}
	for pi, prompt := range prompts {
		want := plain(t, target, prompt, gen, nil).TokenIDs
		for _, k := range []int{1, 2, 4, 8} {
			for _, tc := range []struct {
				name string
				m    *model.Model
			}{{"resident", target}, {"scheduled-25%", streamed}} {
				if tc.name != "resident" && k != 4 && pi%3 != 0 && os.Getenv("LESFARM_FULL") == "" {
					continue // streamed: every K on a third of the prompts, K=4 on all
				}
				res, err := Run(context.Background(), tc.m, draft, Params{PromptIDs: prompt, MaxTokens: gen, K: k})
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(res.TokenIDs, want) {
					t.Fatalf("prompt %d, k=%d, %s: speculative %v, plain greedy %v", pi, k, tc.name, res.TokenIDs, want)
				}
				checkStats(t, &res.Spec, len(res.TokenIDs))
			}
		}
	}
	st := store.Meter().Stats()
	if lim := int64(0.25 * float64(streamed.ExpertBytes)); st.PeakBytes > lim {
		t.Fatalf("store peak %d bytes exceeds the 25%% budget %d", st.PeakBytes, lim)
	}
	if st.Misses == 0 || st.Uses == 0 {
		t.Fatalf("the store streamed nothing: %+v", st)
	}
	t.Logf("streamed: %d uses, hit rate %.3f, peak %d of %d expert bytes", st.Uses, st.HitRate(), st.PeakBytes, streamed.ExpertBytes)
}

// speculativeRef is routing-stats.json's draft_speculative block.
type speculativeRef struct {
	K              int     `json:"k"`
	Prompts        int     `json:"prompts"`
	Rounds         int     `json:"rounds"`
	Drafted        int     `json:"drafted"`
	Accepted       int     `json:"accepted"`
	Generated      int     `json:"generated"`
	AcceptanceRate float64 `json:"acceptance_rate"`
	TokensPerPass  float64 `json:"tokens_per_target_pass"`
	Histogram      []int   `json:"accepted_count_histogram_0_to_4"`
}

// TestTrainedAcceptance measures acceptance on the trained pair with the
// reference protocol as far as the fixture allows: 24 prompts of 32
// held-out tokens (evenly spaced windows of validation.txt's ids; the
// reference drew them from the whole held-out split, which is not
// shipped), K = 4, at least 64 generated tokens per prompt.
//
// Tolerance: acceptance within ±0.08 of 0.275 and tokens per target pass
// within ±0.3 of 2.10. The reference's own sampling error is small
// (~2,900 drafts), but acceptance varies a lot from prompt to prompt
// (per-prompt sd ≈ 0.18: a prompt that falls into a repetition loop
// accepts almost everything), so the mean over 24 other prompts has a
// standard error of ≈ 0.037 and the tolerance is about two of those;
// this run measures 0.316 and 2.21 (deterministic). Also the
// reference ran in PyTorch (F32 arithmetic on F16 weights), where near-tie
// argmaxes can flip. A broken verifier (off-by-one in the accepted
// prefix, a stale draft cache) lands far outside: acceptance drops toward
// chance or rises to ~1.
func TestTrainedAcceptance(t *testing.T) {
	raw, err := os.ReadFile(sharedTestdata(t, "trained/routing-stats.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Spec speculativeRef `json:"draft_speculative"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	ref := doc.Spec
	var refJSON struct {
		IDs []int `json:"validation_txt_token_ids"`
	}
	raw, err = os.ReadFile(sharedTestdata(t, "trained/ref.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &refJSON); err != nil {
		t.Fatal(err)
	}
	target := loadTrained(t, trainedMoE, nil)
	draft := loadTrained(t, trainedDraft, nil)
	ids := refJSON.IDs
	const plen = 32
	stride := (len(ids) - plen) / (ref.Prompts - 1)
	total := Stats{K: ref.K, Histogram: make([]int, ref.K+1)}
	var rates []float64 // per prompt
	for i := range ref.Prompts {
		prompt := ids[i*stride : i*stride+plen]
		// 65 tokens: the prompt's first plus at least 64 from rounds.
		res, err := Run(context.Background(), target, draft, Params{PromptIDs: prompt, MaxTokens: 65, K: ref.K})
		if err != nil {
			t.Fatal(err)
		}
		s := res.Spec
		rates = append(rates, s.AcceptanceRate())
		total.Rounds += s.Rounds
		total.Drafted += s.Drafted
		total.Accepted += s.Accepted
		total.Generated += s.Generated
		for j, c := range s.Histogram {
			total.Histogram[j] += c
		}
	}
	acc, tpp := total.AcceptanceRate(), total.TokensPerTargetPass()
	var mean, sd float64
	for _, r := range rates {
		mean += r / float64(len(rates))
	}
	for _, r := range rates {
		sd += (r - mean) * (r - mean) / float64(len(rates)-1)
	}
	sd = math.Sqrt(sd)
	t.Logf("per-prompt acceptance: mean %.3f, sd %.3f, standard error of the mean %.3f", mean, sd, sd/math.Sqrt(float64(len(rates))))
	t.Logf("k=%d over %d prompts: rounds %d drafted %d accepted %d generated %d; acceptance %.4f (ref %.4f), tokens per target pass %.3f (ref %.2f), histogram %v (ref %v)",
		ref.K, ref.Prompts, total.Rounds, total.Drafted, total.Accepted, total.Generated, acc, ref.AcceptanceRate, tpp, ref.TokensPerPass, total.Histogram, ref.Histogram)
	if math.Abs(acc-ref.AcceptanceRate) > 0.08 {
		t.Errorf("acceptance %.4f, reference %.4f (tolerance 0.08)", acc, ref.AcceptanceRate)
	}
	if math.Abs(tpp-ref.TokensPerPass) > 0.3 {
		t.Errorf("tokens per target pass %.3f, reference %.2f (tolerance 0.3)", tpp, ref.TokensPerPass)
	}
	if os.Getenv("LESFARM_FULL") == "" {
		return
	}
	// The same protocol for other K (documented in docs/runtime.md).
	for _, k := range []int{1, 2, 4, 8} {
		sum := Stats{K: k}
		for i := range ref.Prompts {
			res, err := Run(context.Background(), target, draft, Params{PromptIDs: ids[i*stride : i*stride+plen], MaxTokens: 65, K: k})
			if err != nil {
				t.Fatal(err)
			}
			sum.Rounds += res.Spec.Rounds
			sum.Drafted += res.Spec.Drafted
			sum.Accepted += res.Spec.Accepted
			sum.Generated += res.Spec.Generated
		}
		t.Logf("k=%d: acceptance %.4f, tokens per target pass %.3f, rounds %d", k, sum.AcceptanceRate(), sum.TokensPerTargetPass(), sum.Rounds)
	}
}

// TestTrainedStreamingModes verifies batched K+1-position passes through
// the LES store in every streaming mode: a verify pass demands the union of
// the experts of all its positions per layer (like a prefill batch), the
// output stays plain greedy's and the store never holds more than its
// budget (25% and 10% of the expert bytes).
func TestTrainedStreamingModes(t *testing.T) {
	target := loadTrained(t, trainedMoE, nil)
	draft := loadTrained(t, trainedDraft, nil)
	path := sharedTestdata(t, trainedMoE)
	prompts := validationPrompts(t, target, 12)[:4]
	var want [][]int
	for _, p := range prompts {
		want = append(want, plain(t, target, p, 20, nil).TokenIDs)
	}
	for _, mode := range []expert.Mode{expert.OnDemand, expert.OnDemandParallel, expert.Lookahead, expert.Scheduled} {
		for _, frac := range []float64{0.25, 0.10} {
			var store *expert.Store
			m := loadTrained(t, trainedMoE, modeStore(path, mode, frac, &store))
			var verified int64
			for i, p := range prompts {
				for _, k := range []int{2, 8} {
					before := store.Meter().Stats().Uses
					res, err := Run(context.Background(), m, draft, Params{PromptIDs: p, MaxTokens: 20, K: k})
					if err != nil {
						t.Fatalf("%s %.0f%%: %v", mode, frac*100, err)
					}
					if !slices.Equal(res.TokenIDs, want[i]) {
						t.Fatalf("%s %.0f%% k=%d prompt %d: speculative %v, plain greedy %v", mode, frac*100, k, i, res.TokenIDs, want[i])
					}
					verified += store.Meter().Stats().Uses - before
				}
			}
			st := store.Meter().Stats()
			if lim := int64(frac * float64(m.ExpertBytes)); st.PeakBytes > lim {
				t.Fatalf("%s: store peak %d bytes exceeds the %.0f%% budget %d", mode, st.PeakBytes, frac*100, lim)
			}
			if verified == 0 || st.Misses == 0 {
				t.Fatalf("%s: nothing streamed: %+v", mode, st)
			}
			m.Close()
		}
	}
}
