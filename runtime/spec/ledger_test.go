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

// TestControllerCountsEvictions simulates a read-bound streaming store: a
// pass is 30% compute and 70% waiting on expert reads, a drafted position
// adds 30% compute and 15% reads to its pass, and evicts experts worth
// spill plain passes' reads, which the next pass reads again (the plain
// pass after a probe, or the next verify). With spill 1 no draft length
// pays (k = 1: 1.7 tokens for 1.9 passes), yet each pass alone looks
// cheap: the controller must see the evictions in the bytes of the passes
// after a drafting one. It then decodes plainly (≥ 98% of plain decoding's
// rate in true cost); told no bytes (the evictions hidden in the plain
// passes' times) it drafts and loses more. With spill 0.1 drafting pays
// and it keeps most of the gain.
func TestControllerCountsEvictions(t *testing.T) {
	const plainCost, bytesPlain, alpha = 500e-6, 1 << 20, 0.7
	run := func(spill float64, reportBytes bool) (rate, drafting float64) {
		r := rand.New(rand.NewPCG(3, uint64(spill*10)))
		c := newController(8, true)
		var tokens, secs, pending float64
		const rounds = 6000
		nd := 0
		for range rounds {
			k := c.next()
			acc := 0
			for acc < k && r.Float64() < alpha {
				acc++
			}
			bytes := bytesPlain*(1+0.15*float64(k)) + pending
			pending = bytesPlain * spill * float64(k)
			compute := 0.3 * plainCost * (1 + 0.3*float64(k))
			stall := 0.7 * plainCost * bytes / bytesPlain
			secs += compute + stall
			tokens += float64(acc + 1)
			if k > 0 {
				nd++
			}
			rd := round{proposed: k, accepted: acc, positions: k + 1, verify: time.Duration((compute + stall) * 1e9)}
			if reportBytes {
				rd.bytes, rd.stall = int64(bytes), time.Duration(stall*1e9)
			}
			c.observe(rd)
		}
		return tokens / secs * plainCost, float64(nd) / rounds
	}
	rate, drafting := run(1, true)
	t.Logf("spill 1: %.3f of plain, drafting in %.1f%% of rounds", rate, 100*drafting)
	if rate < 0.98 {
		t.Errorf("spill 1, evictions counted: %.3f of plain decoding's rate (drafting in %.1f%% of rounds), want ≥ 0.98", rate, 100*drafting)
	}
	blind, blindDrafting := run(1, false)
	t.Logf("spill 1, no bytes reported: %.3f of plain, drafting in %.1f%% of rounds", blind, 100*blindDrafting)
	if blind >= rate {
		t.Errorf("without the bytes the controller did as well (%.3f ≥ %.3f): the test does not exercise the eviction count", blind, rate)
	}
	pays, _ := run(0.1, true)
	t.Logf("spill 0.1: %.3f of plain", pays)
	if pays < 1.15 {
		t.Errorf("spill 0.1 (drafting pays): %.3f of plain decoding's rate, want ≥ 1.15", pays)
	}
}
