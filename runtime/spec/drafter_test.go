package spec

import (
	"context"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/runtime/model"
	"github.com/lesfarm/lesfarm/runtime/sample"
)

// TestNGramProposals pins the prompt-lookup rule: the latest earlier
// occurrence of the longest suffix (4 down to 2 tokens), and its
// continuation up to k tokens and the end of the sequence.
func TestNGramProposals(t *testing.T) {
	d := &NGramDrafter{}
	for _, tc := range []struct {
		seq  []int
		k    int
		want []int
	}{
		{[]int{1, 2, 3, 9, 1, 2, 3}, 3, []int{9, 1, 2}},    // 3-gram 1 2 3
		{[]int{5, 6, 7, 5, 6, 8, 5, 6}, 2, []int{8, 5}},    // latest 2-gram 5 6
		{[]int{1, 2, 3, 4, 5}, 4, nil},                     // no repeat
		{[]int{4, 4, 4, 4}, 5, []int{4}},                   // continuation cut at the end
		{[]int{1, 2, 3, 1, 2, 3, 1, 2}, 8, []int{3, 1, 2}}, // 4-gram absent, 3-gram "3 1 2"... latest
		{[]int{9}, 3, nil},                                 // too short
		{[]int{7, 8, 1, 7, 8, 2, 3, 7, 8}, 1, []int{2}},    // latest of two
	} {
		got, err := d.Propose(context.Background(), tc.seq, tc.k, nil, nil)
		if err != nil || !slices.Equal(got, tc.want) && !(len(got) == 0 && len(tc.want) == 0) {
			t.Errorf("%v k=%d: %v %v, want %v", tc.seq, tc.k, got, err, tc.want)
		}
	}
}

// TestNGramAndAdaptiveIdentical: greedy output with the n-gram drafter and
// with adaptive k (model and n-gram drafters) equals plain greedy.
func TestNGramAndAdaptiveIdentical(t *testing.T) {
	target, draft := synth(t, synthMoE), synth(t, synthDense)
	md, err := NewModelDrafter(target, draft)
	if err != nil {
		t.Fatal(err)
	}
	for _, dr := range []Drafter{&NGramDrafter{}, md} {
		dec, err := NewWithDrafter(target, dr)
		if err != nil {
			t.Fatal(err)
		}
		for _, adaptive := range []bool{false, true} {
			for _, k := range []int{1, 3, 8} {
				for i, prompt := range [][]int{{7}, {1, 2, 3, 1, 2, 3, 1, 2}, {299, 0, 17, 42, 42, 42, 9, 100}} {
					p := Params{PromptIDs: prompt, MaxTokens: 40 - 9*i, K: k, Adaptive: adaptive}
					want := plain(t, target, p.PromptIDs, p.MaxTokens, nil)
					got, err := dec.Run(context.Background(), p)
					if err != nil {
						t.Fatal(err)
					}
					if !slices.Equal(got.TokenIDs, want.TokenIDs) || got.StopReason != want.StopReason {
						t.Fatalf("%s adaptive=%v k=%d: %v, plain %v", dr.Name(), adaptive, k, got.TokenIDs, want.TokenIDs)
					}
					s := got.Spec
					if s.Drafter != dr.Name() || s.Rounds == 0 || s.VerifyPositions != s.Rounds+s.Drafted || s.ExpertsPerVerify < s.Rounds*target.ExpertsUsed {
						t.Fatalf("%s: stats %+v", dr.Name(), s)
					}
				}
			}
		}
	}
}

// TestControllerTurnsOff: with acceptance 0 and verify passes costing
// their positions, the controller settles on plain decoding and probes
// rarely; with acceptance 1 and a flat verify cost it drafts the maximum.
func TestControllerTurnsOff(t *testing.T) {
	c := newController(8, true)
	spec := 0
	for range 400 {
		k := c.next()
		if k > 0 {
			spec++
		}
		c.observe(round{proposed: k, positions: k + 1, verify: time500us(k + 1), draft: time500us(k) / 10})
	}
	if spec > 400/20 {
		t.Fatalf("never-accepting drafter drafted in %d of 400 rounds", spec)
	}
	c = newController(8, true)
	last := 0
	for range 50 {
		last = c.next()
		c.observe(round{proposed: last, accepted: last, positions: last + 1, verify: time500us(1), draft: time500us(last) / 100})
	}
	if last != 8 {
		t.Fatalf("always-accepting cheap drafter: k=%d, want 8", last)
	}
}

func time500us(n int) time.Duration { return time.Duration(n) * 500 * time.Microsecond }

// TestRejectionKeepsTargetDistribution: the token a sampled round yields
// at its first drafted position is distributed as the target's p, for a
// sampled draft distribution q and for a deterministic (n-gram) proposal.
func TestRejectionKeepsTargetDistribution(t *testing.T) {
	const V = 6
	logits := []float32{2, 1, 0.5, 0, -1, 1.5} // target at the position
	qlog := []float32{0, 2, 0, 1, 0, -2}       // draft
	smp, err := sample.New(sample.Params{Temperature: 1, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	p := make([]float64, V)
	smp.Dist(logits, p)
	for _, det := range []bool{false, true} {
		var dr Drafter = &NGramDrafter{}
		if !det {
			dr = &ModelDrafter{}
		}
		dec := &Decoder{target: &model.Model{Config: model.Config{Vocab: V}}, drafter: dr, p: make([]float64, V), qs: [][]float64{make([]float64, V)}}
		counts := make([]float64, V)
		const trials = 200000
		// Two target rows: the drafted position, then the next.
		rows := append(slices.Clone(logits), logits...)
		for range trials {
			var x int
			if det {
				x = 1 // a fixed proposal the target does not favour
			} else {
				smp.Dist(qlog, dec.qs[0])
				x = smp.Draw(dec.qs[0])
			}
			acc, next := dec.accept(rows, []int{0, x}, 1, smp)
			tok := next
			if acc == 1 {
				tok = x
			}
			counts[tok]++
		}
		var tv float64
		for i := range V {
			tv += math.Abs(counts[i]/trials-p[i]) / 2
		}
		if tv > 0.006 {
			t.Fatalf("deterministic=%v: yielded distribution %v differs from target %v (TV %.4f)", det, counts, p, tv)
		}
	}
}

// TestModelDrafterBoundedCatchUp: after a stretch without drafting longer
// than maxBacklog, a ModelDrafter restarts from the last maxBacklog tokens
// (its proposals are those of a fresh drafter given only them), and later
// rewinds map back to sequence positions.
func TestModelDrafterBoundedCatchUp(t *testing.T) {
	target, draft := synth(t, synthMoE), synth(t, synthDense)
	md, err := NewModelDrafter(target, draft)
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := NewModelDrafter(target, draft)
	if err != nil {
		t.Fatal(err)
	}
	seq := make([]int, 50)
	for i := range seq {
		seq[i] = (i*37 + 5) % target.Vocab
	}
	ctx := context.Background()
	if err := md.Start(64); err != nil {
		t.Fatal(err)
	}
	if _, err := md.Propose(ctx, seq[:10], 2, nil, nil); err != nil {
		t.Fatal(err)
	}
	md.Rewind(10)
	got, err := md.Propose(ctx, seq[:40], 3, nil, nil) // backlog 30 > maxBacklog
	if err != nil {
		t.Fatal(err)
	}
	got = slices.Clone(got)
	if err := fresh.Start(64); err != nil {
		t.Fatal(err)
	}
	want, err := fresh.Propose(ctx, seq[40-maxBacklog:40], 3, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("after a long backlog: %v, fresh drafter on the last %d tokens %v", got, maxBacklog, want)
	}
	md.Rewind(42)
	fresh.Rewind(42 - (40 - maxBacklog))
	got, err = md.Propose(ctx, seq[:44], 2, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	got = slices.Clone(got)
	want, err = fresh.Propose(ctx, seq[40-maxBacklog:44], 2, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("after rewinding: %v, want %v", got, want)
	}
}
