package spec

import (
	"context"
	"slices"
	"testing"

	"github.com/lesfarm/lesfarm/runtime/moe"
)

// partResident is a moe.Source that serves the model's experts but reports
// only some of them resident (moe.Residency), as a streaming store would.
type partResident struct {
	moe.Source
	resident func(layer, expert int) bool
}

func (p partResident) Resident(layer, expert int) bool { return p.resident(layer, expert) }

// TestCutVerify runs the self-draft (every draft is the target's own token)
// with CutVerify over a source that holds a third, two thirds or none of
// the experts: the output must be plain greedy's, drafts are cut where a
// drafted position would add reads (fewer with more slack), and the
// positions verified plus those cut account for every draft.
func TestCutVerify(t *testing.T) {
	m := synth(t, synthMoE)
	orig := m.Experts
	t.Cleanup(func() { m.Experts = orig })
	prompt := []int{1, 2, 3, 4, 5}
	for _, tc := range []struct {
		name     string
		resident func(l, e int) bool
		slack    int
		wantCut  bool
	}{
		{"third", func(l, e int) bool { return (l*7+e)%3 == 0 }, 0, true},
		{"two-thirds", func(l, e int) bool { return (l*7+e)%3 != 0 }, 0, true},
		{"none", func(int, int) bool { return false }, 0, true},
		{"none-slack", func(int, int) bool { return false }, synthMoE.ExpertsUsed, false},
		{"all", func(int, int) bool { return true }, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m.Experts = partResident{Source: orig, resident: tc.resident}
			for _, k := range []int{1, 3, 8} {
				res := same(t, m, m, Params{PromptIDs: prompt, MaxTokens: 40, K: k, CutVerify: true, CutSlack: tc.slack})
				s := res.Spec
				if (s.Cut > 0) != tc.wantCut {
					t.Fatalf("k=%d: %d drafts cut, want cuts %v", k, s.Cut, tc.wantCut)
				}
				if s.Accepted != s.Drafted {
					t.Fatalf("k=%d: self-draft accepted %d of %d verified", k, s.Accepted, s.Drafted)
				}
				if s.VerifyPositions != s.Rounds+s.Drafted {
					t.Fatalf("k=%d: %d positions for %d rounds and %d drafts", k, s.VerifyPositions, s.Rounds, s.Drafted)
				}
			}
		})
	}
	// A source without Residency never cuts.
	m.Experts = orig
	res := same(t, m, m, Params{PromptIDs: prompt, MaxTokens: 20, K: 4, CutVerify: true})
	if res.Spec.Cut != 0 {
		t.Fatalf("resident source: %d drafts cut", res.Spec.Cut)
	}
}

// TestCutVerifyKeepsPositions checks the model contract the decoder relies
// on: a pass that CutVerify shortens returns the logits of the positions it
// kept, bit-identical to those of the full pass, and caches only them.
func TestCutVerifyKeepsPositions(t *testing.T) {
	m := synth(t, synthMoE)
	orig := m.Experts
	t.Cleanup(func() { m.Experts = orig })
	toks := []int{5, 17, 42, 99, 3, 250, 7, 8, 9}
	full, err := m.NewState(32)
	if err != nil {
		t.Fatal(err)
	}
	want, err := full.Forward(context.Background(), toks, true)
	if err != nil {
		t.Fatal(err)
	}
	want = slices.Clone(want)
	V := m.Vocab
	cuts := 0
	for seed := range 12 {
		m.Experts = partResident{Source: orig, resident: func(l, e int) bool { return (l*5+e*3+seed)%4 != 0 }}
		st, err := m.NewState(32)
		if err != nil {
			t.Fatal(err)
		}
		st.CutVerify = true
		got, err := st.Forward(context.Background(), toks, true)
		if err != nil {
			t.Fatal(err)
		}
		kept := len(got) / V
		if kept < 1 || kept > len(toks) || st.Pos() != kept || st.Cut != len(toks)-kept {
			t.Fatalf("seed %d: %d positions' logits, pos %d, cut %d", seed, kept, st.Pos(), st.Cut)
		}
		if !slices.Equal(got, want[:kept*V]) {
			t.Fatalf("seed %d: logits of the %d kept positions differ from the full pass", seed, kept)
		}
		if kept < len(toks) {
			cuts++
		}
	}
	if cuts == 0 {
		t.Fatal("no pass was cut: the test does not exercise CutVerify")
	}
}
