package spec

import (
	"context"
	"errors"
	"github.com/lesfarm/lesfarm/internal/fixture"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/lesfarm/lesfarm/runtime/generate"
	"github.com/lesfarm/lesfarm/runtime/model"
	"github.com/lesfarm/lesfarm/runtime/tensor"
	"github.com/lesfarm/lesfarm/runtime/trace"
)

// synth writes a synthetic model and loads it.
func synth(t testing.TB, c model.SynthConfig) *model.Model {
	t.Helper()
	p := filepath.Join(t.TempDir(), "synth.gguf")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := model.WriteSynthetic(f, c); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(p, model.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

var (
	synthMoE   = model.SynthConfig{Layers: 2, Experts: 8, ExpertsUsed: 2, Hidden: 64, ExpertFFN: 64, Heads: 2, Vocab: 300, Context: 64, Type: tensor.F32, Seed: 1}
	synthDense = model.SynthConfig{Arch: "qwen3", Layers: 1, Hidden: 32, ExpertFFN: 64, Heads: 2, Vocab: 300, Context: 64, Type: tensor.F32, Seed: 1}
)

// plain is the reference: generate.Run's greedy output.
func plain(t testing.TB, m *model.Model, prompt []int, maxTokens int, eog func(int) bool) *generate.Result {
	t.Helper()
	res, err := generate.Run(context.Background(), m, generate.Params{PromptIDs: prompt, MaxTokens: maxTokens, IsEOG: eog})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// same runs spec.Run and requires plain greedy's tokens and stop reason.
func same(t *testing.T, target, draft *model.Model, p Params) *Result {
	t.Helper()
	want := plain(t, target, p.PromptIDs, p.MaxTokens, p.IsEOG)
	got, err := Run(context.Background(), target, draft, p)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.TokenIDs, want.TokenIDs) || got.StopReason != want.StopReason {
		t.Fatalf("k=%d max=%d: speculative %v (%s), plain greedy %v (%s)", p.K, p.MaxTokens, got.TokenIDs, got.StopReason, want.TokenIDs, want.StopReason)
	}
	checkStats(t, &got.Spec, len(got.TokenIDs))
	return got
}

// checkStats checks the counters' internal consistency.
func checkStats(t *testing.T, s *Stats, generated int) {
	t.Helper()
	sum, acc := 0, 0
	for i, c := range s.Histogram {
		sum += c
		acc += i * c
	}
	if len(s.Histogram) != s.K+1 || sum != s.Rounds || acc != s.Accepted || s.Accepted > s.Drafted || s.Drafted > s.K*s.Rounds {
		t.Fatalf("inconsistent stats %+v", s)
	}
	// Every round yields its accepted tokens plus one, except that a stop
	// may drop the tail of the last round; the first token is the prompt's.
	if s.Generated != generated-1 || s.Generated > s.Accepted+s.Rounds || s.Generated < s.Accepted+s.Rounds-s.K {
		t.Fatalf("generated %d tokens, stats %+v", generated, s)
	}
}

// TestSelfDraftAcceptsAll uses the target as its own draft: every draft
// token must be accepted (the batched verify pass computes the same logits
// as single-token decoding), so each round yields K+1 tokens.
func TestSelfDraftAcceptsAll(t *testing.T) {
	m := synth(t, synthMoE)
	for _, k := range []int{1, 2, 4, 8} {
		res := same(t, m, m, Params{PromptIDs: []int{1, 2, 3, 4, 5}, MaxTokens: 40, K: k})
		s := res.Spec
		if s.Accepted != s.Drafted || s.AcceptanceRate() != 1 {
			t.Fatalf("k=%d: self-draft accepted %d of %d", k, s.Accepted, s.Drafted)
		}
		if s.Histogram[k] < s.Rounds-2 {
			t.Fatalf("k=%d: full-acceptance rounds %v", k, s.Histogram)
		}
		if want := float64(39) / float64(s.Rounds); s.TokensPerTargetPass() != want || s.Rounds > 39/(k+1)+2 {
			t.Fatalf("k=%d: %d rounds, %.2f tokens per pass", k, s.Rounds, s.TokensPerTargetPass())
		}
	}
}

// TestSyntheticPairIdentical uses a weak dense draft (random weights, same
// tokenizer): most drafts are rejected, which exercises rewinding.
func TestSyntheticPairIdentical(t *testing.T) {
	target, draft := synth(t, synthMoE), synth(t, synthDense)
	dec, err := New(target, draft) // one Decoder: caches reused across runs
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []int{1, 2, 3, 4, 8} {
		for i, prompt := range [][]int{{7}, {1, 2, 3, 4, 5}, {299, 0, 17, 42, 42, 42, 9, 100}} {
			p := Params{PromptIDs: prompt, MaxTokens: 30 - 9*i, K: k}
			want := same(t, target, draft, p)
			got, err := dec.Run(context.Background(), p)
			if err != nil || !slices.Equal(got.TokenIDs, want.TokenIDs) || got.Spec.Accepted != want.Spec.Accepted {
				t.Fatalf("reused decoder: %v %v, want %v", err, got.TokenIDs, want.TokenIDs)
			}
		}
	}
}

// TestStops covers the token limit inside a round, an end-of-generation
// token inside the accepted drafts, K above the remaining budget and the
// context length, against plain greedy.
func TestStops(t *testing.T) {
	m := synth(t, synthMoE)
	draft := synth(t, synthDense)
	prompt := []int{1, 2, 3, 4, 5}
	ref := plain(t, m, prompt, 40, nil).TokenIDs
	t.Run("max-tokens-mid-round", func(t *testing.T) {
		for max := 1; max <= 12; max++ {
			for _, d := range []*model.Model{m, draft} {
				res := same(t, m, d, Params{PromptIDs: prompt, MaxTokens: max, K: 4})
				if len(res.TokenIDs) != max || res.StopReason != generate.StopMaxTokens {
					t.Fatalf("max %d: %d tokens, %s", max, len(res.TokenIDs), res.StopReason)
				}
			}
		}
	})
	t.Run("eog-inside-accepted-drafts", func(t *testing.T) {
		// With the self-draft, round one (K=8) accepts ref[1..8]; make
		// ref[4] end generation: its tail must be dropped.
		eogID := ref[4]
		eog := func(id int) bool { return id == eogID }
		first := slices.Index(ref, eogID)
		res := same(t, m, m, Params{PromptIDs: prompt, MaxTokens: 40, K: 8, IsEOG: eog})
		if res.StopReason != generate.StopEOG || len(res.TokenIDs) != first+1 {
			t.Fatalf("stopped %s after %d tokens, want eog after %d", res.StopReason, len(res.TokenIDs), first+1)
		}
		if res.Spec.Rounds != 1 || res.Spec.Accepted != 8 || res.Spec.Generated != first {
			t.Fatalf("stats %+v", res.Spec)
		}
		same(t, m, draft, Params{PromptIDs: prompt, MaxTokens: 40, K: 8, IsEOG: eog})
	})
	t.Run("k-above-remaining", func(t *testing.T) {
		res := same(t, m, m, Params{PromptIDs: prompt, MaxTokens: 3, K: 8})
		// The prompt gives token 1; one round drafts 1 token and the
		// target adds the third: K is cut from 8 to 1.
		if res.Spec.Rounds != 1 || res.Spec.Drafted != 1 || res.Spec.Histogram[1] != 1 {
			t.Fatalf("stats %+v", res.Spec)
		}
	})
	t.Run("context-length", func(t *testing.T) {
		long := make([]int, 50)
		for i := range long {
			long[i] = (i * 37) % 300
		}
		for _, k := range []int{1, 4, 8, 20} {
			for _, d := range []*model.Model{m, draft} {
				res := same(t, m, d, Params{PromptIDs: long, MaxTokens: 100, K: k})
				if res.StopReason != generate.StopContext || len(long)+len(res.TokenIDs)-1 != m.Context {
					t.Fatalf("k=%d: %s after %d tokens", k, res.StopReason, len(res.TokenIDs))
				}
			}
		}
	})
	t.Run("draft-context-shorter", func(t *testing.T) {
		c := synthDense
		c.Context = 16
		short := synth(t, c)
		res := same(t, m, short, Params{PromptIDs: prompt, MaxTokens: 40, K: 4})
		if res.Spec.Drafted == 0 || res.Spec.Rounds <= 40/5 {
			t.Fatalf("a 16-position draft should draft a while and then stop: %+v", res.Spec)
		}
	})
}

// cancelSink cancels the context at the given layer event of the first
// Verify step's forward pass (mid-round: the drafts are already made).
type cancelSink struct {
	cancel  context.CancelFunc
	layers  int
	atLayer int
}

func (c *cancelSink) Token(ev *trace.TokenEvent) {}
func (c *cancelSink) Read(*trace.ReadEvent)      {}
func (c *cancelSink) Layer(ev *trace.LayerEvent) {
	if ev.Step >= 2 { // step 0 is the prefill, 1 the first round
		c.layers++
		if c.layers == c.atLayer {
			c.cancel()
		}
	}
}

func TestCancelMidRound(t *testing.T) {
	m := synth(t, synthMoE)
	prompt := []int{1, 2, 3, 4, 5}
	ref := plain(t, m, prompt, 40, nil).TokenIDs
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sink := &cancelSink{cancel: cancel, atLayer: 1}
	res, err := Run(ctx, m, m, Params{PromptIDs: prompt, MaxTokens: 40, K: 4, Sink: sink})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if res == nil || len(res.TokenIDs) == 0 || len(res.TokenIDs) >= 40 || !slices.Equal(res.TokenIDs, ref[:len(res.TokenIDs)]) {
		t.Fatalf("partial result %v is not a prefix of %v", res, ref)
	}
	// Cancelled before starting: no tokens, the context's error.
	ctx2, cancel2 := context.WithCancel(context.Background())
	cancel2()
	if _, err := Run(ctx2, m, m, Params{PromptIDs: prompt, MaxTokens: 4}); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
}

func TestVocabMismatch(t *testing.T) {
	m := synth(t, synthMoE)
	c := synthDense
	c.Vocab = 400
	bigger := synth(t, c)
	_, err := Run(context.Background(), m, bigger, Params{PromptIDs: []int{1}, MaxTokens: 4})
	if !errors.Is(err, ErrVocabMismatch) {
		t.Fatalf("err = %v, want ErrVocabMismatch", err)
	}
	t.Log(err)
	// Same size, other merges: synth learns its first merges from its
	// calibration text, whatever the seed, and the seed picks the rest.
	c = synthDense
	c.Vocab = 4096
	same := synth(t, c)
	c.Seed = 99
	other := synth(t, c)
	if err := CheckVocab(same, other); !errors.Is(err, ErrVocabMismatch) {
		t.Fatalf("err = %v, want ErrVocabMismatch for differing tokens", err)
	}
	t.Log(CheckVocab(same, other))
}

func TestBadParams(t *testing.T) {
	m := synth(t, synthMoE)
	for _, p := range []Params{
		{PromptIDs: nil, MaxTokens: 4},
		{PromptIDs: []int{1}, MaxTokens: 0},
		{PromptIDs: []int{1}, MaxTokens: 4, K: -1},
		{PromptIDs: []int{1}, MaxTokens: 4, K: MaxK + 1},
		{PromptIDs: make([]int, 65), MaxTokens: 4},
	} {
		if _, err := Run(context.Background(), m, m, p); err == nil {
			t.Fatalf("%+v: no error", p)
		}
	}
}

// sharedTestdata returns ../shared/testdata/rel relative to the repo root,
// skipping loudly when it is missing.
func sharedTestdata(t testing.TB, rel string) string {
	t.Helper()
	p := filepath.Join(fixture.SharedDir(), rel)
	if _, err := os.Stat(p); err != nil {
		fixture.Missing(t, p, err, "speculative decoding on the trained MoE")
	}
	return p
}
