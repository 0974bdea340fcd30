package spec

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/runtime/moe"
	"github.com/lesfarm/lesfarm/runtime/sample"
)

// fakeDevice is an expert source on a made-up device clock: every decode
// pass of n positions (one position, or a verify announced by VerifyNext)
// costs cost(n) of device compute, whatever the host spends.
type fakeDevice struct {
	moe.Source
	cost    func(n int) time.Duration
	total   time.Duration
	verify  bool
	batches int
}

func (f *fakeDevice) Batch(n int) {
	if n == 1 || f.verify {
		f.total += f.cost(n)
		f.batches++
	}
	f.verify = false
}

func (f *fakeDevice) VerifyNext() { f.verify = true }

func (f *fakeDevice) Totals() (time.Duration, time.Duration, bool) { return f.total, 0, true }

// oracleDrafter proposes the target's own greedy continuation (want, after
// a prompt of n tokens): every draft is accepted.
type oracleDrafter struct {
	want []int
	n    int
	out  []int
}

func (d *oracleDrafter) Name() string        { return "oracle" }
func (d *oracleDrafter) Start(int) error     { return nil }
func (d *oracleDrafter) Rewind(int)          {}
func (d *oracleDrafter) Deterministic() bool { return true }
func (d *oracleDrafter) modelFree()          {}
func (d *oracleDrafter) Propose(_ context.Context, seq []int, k int, _ *sample.Sampler, _ [][]float64) ([]int, error) {
	i := len(seq) - d.n
	d.out = append(d.out[:0], d.want[min(i, len(d.want)):min(i+k, len(d.want))]...)
	return d.out, nil
}

// TestControllerWeighsDeviceClock: with a target on a device clock the
// adaptive controller weighs passes by that clock, not by the host's CPU
// time. The host work is the same in both cases (same model, same
// drafts, every draft accepted); only the device's price of a verify pass
// differs. Where a verify pass costs the device little more than a plain
// one, auto drafts (most tokens come from drafted rounds); where it costs
// three plain passes per position, auto decodes plainly, drafting only
// the rounds its ledger allows. No timing enters the decision: the device
// costs are fixed numbers and the drafter's wall time is a slice copy.
func TestControllerWeighsDeviceClock(t *testing.T) {
	target := synth(t, synthMoE)
	prompt := []int{7, 3}
	const gen = 40
	want := plain(t, target, prompt, gen, nil).TokenIDs
	for _, tc := range []struct {
		name string
		cost func(n int) time.Duration
		pays bool
	}{
		{"verify-cheap", func(n int) time.Duration { return time.Millisecond + time.Duration(n-1)*10*time.Microsecond }, true},
		{"verify-dear", func(n int) time.Duration {
			if n == 1 {
				return time.Millisecond
			}
			return time.Duration(3*n) * time.Millisecond
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fd := &fakeDevice{Source: target.Experts, cost: tc.cost}
			target.Experts = fd
			defer func() { target.Experts = fd.Source }()
			dec, err := NewWithDrafter(target, &oracleDrafter{want: want, n: len(prompt)})
			if err != nil {
				t.Fatal(err)
			}
			var all Stats
			for range 8 {
				res, err := dec.Run(context.Background(), Params{PromptIDs: prompt, MaxTokens: gen, K: 8, Adaptive: true})
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(res.TokenIDs, want) {
					t.Fatalf("tokens %v, plain %v", res.TokenIDs, want)
				}
				all.Add(&res.Spec)
			}
			drafting := all.Rounds - all.Off
			t.Logf("%d rounds, %d plain, %d drafted tokens, %.2f tokens per pass", all.Rounds, all.Off, all.Drafted, all.TokensPerTargetPass())
			if tc.pays && all.TokensPerTargetPass() < 3 {
				t.Fatalf("drafting pays on the device clock, yet %.2f tokens per pass (%d of %d rounds plain)", all.TokensPerTargetPass(), all.Off, all.Rounds)
			}
			if !tc.pays && drafting > all.Rounds/20 {
				t.Fatalf("drafting never pays on the device clock, yet %d of %d rounds drafted", drafting, all.Rounds)
			}
		})
	}
}
