package spec

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/lesfarm/lesfarm/runtime/model"
	"github.com/lesfarm/lesfarm/runtime/tensor"
)

var synthQwen35 = model.SynthConfig{Arch: "qwen35moe", Layers: 4, Experts: 8, ExpertsUsed: 2, Hidden: 64, ExpertFFN: 64,
	Heads: 2, KVHeads: 1, HeadDim: 32, Vocab: 300, Context: 128, Type: tensor.F32, Seed: 5}

// TestMTPDraftIdentical: drafting with a qwen35moe model's own MTP block
// gives plain greedy's tokens and stop reason for every K, across prompt
// batches (the block catches up batch by batch) and the token limit; on
// the repo's synthetic model and on the shared fixture (whose MTP drafts
// the reference computed).
func TestMTPDraftIdentical(t *testing.T) {
	models := map[string]*model.Model{"synth": synth(t, synthQwen35)}
	if p := filepath.Join(filepath.Dir(sharedTestdataDir()), "testdata", "qwen35moe", "tiny-qwen35moe-f32.gguf"); fileExists(p) {
		m, err := model.Load(p, model.Options{Threads: 1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		models["shared-f32"] = m
	}
	for name, m := range models {
		for _, k := range []int{1, 2, 4, 7} {
			for _, batch := range []int{0, 3} {
				prompt := []int{5, 17, 200, 42, 9, 77, 1}
				p := Params{PromptIDs: prompt, MaxTokens: 20, K: k, Batch: batch}
				want := plain(t, m, p.PromptIDs, p.MaxTokens, nil)
				got, err := RunMTP(context.Background(), m, p)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got.TokenIDs, want.TokenIDs) || got.StopReason != want.StopReason {
					t.Fatalf("%s k=%d batch=%d: MTP speculative %v (%s), plain greedy %v (%s)", name, k, batch, got.TokenIDs, got.StopReason, want.TokenIDs, want.StopReason)
				}
				checkStats(t, &got.Spec, len(got.TokenIDs))
				if got.Spec.Drafted == 0 {
					t.Fatalf("%s: the MTP block drafted nothing", name)
				}
				t.Logf("%s k=%d batch=%d: %d rounds, accepted %d of %d", name, k, batch, got.Spec.Rounds, got.Spec.Accepted, got.Spec.Drafted)
			}
		}
	}
	// Random weights never draft the target's token, so force some drafts
	// to the true continuation: partial acceptance, multi-position
	// catch-up and rollback of the target's recurrent state.
	for name, m := range models {
		prompt := []int{5, 17, 200, 42, 9, 77, 1}
		want := plain(t, m, prompt, 24, nil)
		for _, k := range []int{2, 5} {
			dec, err := NewMTP(m)
			if err != nil {
				t.Fatal(err)
			}
			dec.mtp.override = func(pos, tok int) int {
				if g := pos - len(prompt); g%3 != 2 && g < len(want.TokenIDs) {
					return want.TokenIDs[g]
				}
				return tok
			}
			got, err := dec.Run(context.Background(), Params{PromptIDs: prompt, MaxTokens: 24, K: k, Batch: 4})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got.TokenIDs, want.TokenIDs) {
				t.Fatalf("%s k=%d forced drafts: %v, plain greedy %v", name, k, got.TokenIDs, want.TokenIDs)
			}
			checkStats(t, &got.Spec, len(got.TokenIDs))
			if got.Spec.Accepted == 0 || got.Spec.Accepted == got.Spec.Drafted {
				t.Fatalf("%s k=%d: accepted %d of %d; want partial acceptance", name, k, got.Spec.Accepted, got.Spec.Drafted)
			}
			t.Logf("%s k=%d forced: %d rounds, accepted %d of %d, histogram %v", name, k, got.Spec.Rounds, got.Spec.Accepted, got.Spec.Drafted, got.Spec.Histogram)
		}
	}
	if _, err := NewMTP(synth(t, synthMoE)); err == nil {
		t.Fatal("a qwen3moe model without an MTP block was accepted")
	}
}

func sharedTestdataDir() string {
	wd, _ := os.Getwd()
	return filepath.Join(wd, "..", "..", "..", "shared", "x")
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// TestMTPLazyCatchUp: the MTP drafter forwards its pending positions only
// when asked for a draft, from a fresh cache of the last maxBacklog
// positions when more are pending (a prompt longer than that, a stretch
// of plain rounds under adaptive k). Greedy output stays plain greedy's,
// for fixed and adaptive k, with forced drafts so rounds accept.
func TestMTPLazyCatchUp(t *testing.T) {
	m := synth(t, synthQwen35)
	prompt := make([]int, 3*maxBacklog)
	for i := range prompt {
		prompt[i] = (i*37 + 11) % m.Vocab
	}
	want := plain(t, m, prompt, 40, nil)
	for _, adaptive := range []bool{false, true} {
		dec, err := NewMTP(m)
		if err != nil {
			t.Fatal(err)
		}
		dec.mtp.override = func(pos, tok int) int {
			if g := pos - len(prompt); g%4 != 3 && g < len(want.TokenIDs) {
				return want.TokenIDs[g]
			}
			return tok
		}
		for rep := range 3 {
			got, err := dec.Run(context.Background(), Params{PromptIDs: prompt, MaxTokens: 40, K: 3, Adaptive: adaptive})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got.TokenIDs, want.TokenIDs) || got.StopReason != want.StopReason {
				t.Fatalf("adaptive=%v rep %d: %v, plain greedy %v", adaptive, rep, got.TokenIDs, want.TokenIDs)
			}
			checkStats(t, &got.Spec, len(got.TokenIDs))
			if !adaptive && (got.Spec.Accepted == 0 || got.Spec.Drafted == 0) {
				t.Fatalf("rep %d: accepted %d of %d drafts; want forced acceptance", rep, got.Spec.Accepted, got.Spec.Drafted)
			}
			if off := dec.mtp.off; !adaptive && off < len(prompt)-maxBacklog {
				t.Fatalf("rep %d: a %d-token prompt was caught up from position %d, want a restart at ≥ %d", rep, len(prompt), off, len(prompt)-maxBacklog)
			}
		}
	}
}
