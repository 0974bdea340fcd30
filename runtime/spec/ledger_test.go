package spec

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// TestControllerProbeBound checks the ledger's bound (see controller) by
// counting, not timing: against drafters that accept with probability α
// (0 to 0.6), verify passes that cost plain·(1 + slope·(positions−1)) and
// drafts that cost draft·plain per token, the work of all rounds — verify
// positions weighed by that cost, plus the drafts — exceeds the plain
// passes the same tokens need by at most share of the tokens plus the
// constant (initCredit + one round's charge), with and without
// measurement noise (pass times inflated up to +60%, a fixed seed).
// Where drafting never pays (slope 1, no acceptance) that is the probing
// overhead: ≤ 1% of the plain rounds once settled.
func TestControllerProbeBound(t *testing.T) {
	const plainCost, rounds = 500e-6, 20000
	for _, alpha := range []float64{0, 0.3, 0.6} {
		for _, slope := range []float64{0.6, 1} {
			for _, draftShare := range []float64{0, 0.3} {
				for _, noisy := range []bool{false, true} {
					name := fmt.Sprintf("a%.1f/slope%.1f/draft%.1f/noise%v", alpha, slope, draftShare, noisy)
					t.Run(name, func(t *testing.T) {
						r := rand.New(rand.NewPCG(uint64(alpha*10), uint64(slope*10+draftShare*100)))
						c := newController(8, true)
						var tokens, work float64 // work in plain passes
						positions, drafting := 0, 0
						for range rounds {
							k := c.next()
							acc := 0
							for acc < k && r.Float64() < alpha {
								acc++
							}
							v := 1 + slope*float64(k)
							d := draftShare * float64(k)
							tokens += float64(acc + 1)
							work += v + d
							positions += k + 1
							if k > 0 {
								drafting++
							}
							noise := func(x float64) time.Duration {
								if !noisy {
									return time.Duration(x * plainCost * 1e9)
								}
								return time.Duration(x * plainCost * (1 + 0.6*r.Float64()*r.Float64()) * 1e9)
							}
							c.observe(round{proposed: k, accepted: acc, positions: k + 1, verify: noise(v), draft: noise(d)})
						}
						over := work - tokens
						limit := share*tokens + initCredit + (1+draftShare)*8
						if noisy {
							limit = 2*share*tokens + initCredit + (1+draftShare)*8
						}
						t.Logf("overhead %.1f plain passes over %.0f tokens (%.2f%%), %d drafting rounds, %d positions; limit %.1f", over, tokens, 100*over/tokens, drafting, positions, limit)
						if over > limit {
							t.Errorf("drafting cost %.1f plain passes more than plain decoding for %.0f tokens, above the bound %.1f", over, tokens, limit)
						}
					})
				}
			}
		}
	}
}
