package spec

import (
	"math"
	"time"
)

// controller chooses the draft length of each round. With a fixed K it
// always asks for K. Adaptive, it keeps a decayed estimate of the
// per-token acceptance probability α and measured costs: the target pass
// time per number of positions (in a streaming mode this includes the
// expert reads of the union of the positions' experts) and the draft time
// per proposed token. Each round it takes the k in [0, K] that maximises
// the expected tokens per second
//
//	rate(k) = (1 + α₁ + α₁α₂ + … + α₁…α_k) / (verify(k+1) + k·draft)
//
// with α_i the acceptance of draft position i given the earlier ones
// (see expected: each position's decayed counts shrunk toward the
// position before it),
// where rate(0) is plain decoding, and costs are the smallest of the last 8
// measurements (see estimate). The on/off decision is made with care,
// because a wrong "on" costs more than the speculation could gain:
//   - hysteresis: speculation turns on only when the best k beats plain by
//     onMargin with lower confidence bounds of the α_i (one standard
//     deviation of the decayed acceptance counts), and stays on while it
//     beats plain with the estimates themselves;
//   - when off, it probes with the best k's draft (the round it would run,
//     so the positions that decide are the ones measured) after 8 plain
//     rounds; the gap to the next probe
//     doubles (up to maxProbeGap) while the estimate says drafting loses
//     and halves (down to 2) while only the confidence bound keeps it off,
//     so a drafter that does not pay costs a bounded share of the rounds
//     (about 1/maxProbeGap once settled) and one that pays is found within
//     a few probes.
//
// A Decoder keeps its adaptive controller across Runs of the same K: the
// costs and the acceptance it learned carry over, so short generations do
// not each pay the measuring rounds again.
type controller struct {
	k        int // K: the fixed length, or the adaptive maximum
	adaptive bool

	succ, fail float64    // decayed acceptance counts, all positions
	pos        []counts   // by draft position 1..K: decayed counts of the position's acceptance given the earlier ones
	verify     []estimate // by positions 1..K+1
	draft      estimate   // per proposed token
	plain      int        // plain rounds since the last probe
	probeGap   int
	rounds     int
	on         bool // the last choice drafted (hysteresis)
	probing    bool // the last choice was a probe
	// probeCost is the last probe's cost beyond a plain pass, in plain
	// passes (a model drafter's catch-up is in it).
	probeCost float64
}

// onMargin is how much the best draft length must beat plain decoding (in
// expected tokens per second, with the lower bound of α) to turn
// speculation on; maxProbeGap bounds the plain rounds between probes.
// Probes are also spaced so that their measured extra cost stays within
// probeShare of the plain rounds between them (at most maxCostGap rounds).
const (
	onMargin    = 0.05
	maxProbeGap = 128
	probeShare  = 0.02
	maxCostGap  = 1024
)

// calibrate is how often (in rounds) a drafting controller decodes one
// round plainly to re-measure the plain pass; explore is how often it
// drafts two tokens past the best length, to measure positions the chosen
// rounds never reach.
const (
	calibrate = 16
	explore   = 32
)

// estimate is a measured cost in seconds: the smallest of the last
// window samples. Another process taking the CPU, or the garbage
// collector, only ever lengthens a pass, so a low order statistic of
// recent passes tracks the pass's own cost on a shared machine far better
// than a mean; the window still follows real changes (a growing context,
// a colder cache).
type estimate struct {
	v    float64
	n    int
	last [window]float64
}

const window = 8

// minOf is the smallest of the last m samples (all kept ones if fewer).
func (e *estimate) minOf(m int) float64 {
	m = min(m, e.n, window)
	v := e.v
	if m > 0 {
		v = e.last[(e.n-1)%window]
	}
	for i := 1; i < m; i++ {
		v = min(v, e.last[(e.n-1-i)%window])
	}
	return v
}

func (e *estimate) add(x float64) {
	e.last[e.n%window] = x
	e.n++
	e.v = x
	for _, y := range e.last[:min(e.n, window)] {
		e.v = min(e.v, y)
	}
}

// decay weights old acceptance observations (a window of about 20 rounds).
const decay = 0.95

// counts are decayed acceptance counts of one draft position: s rounds in
// which the position's token was accepted, f in which it was the first
// rejected one (rounds that stopped earlier, or proposed fewer tokens, do
// not observe it).
type counts struct{ s, f float64 }

// shrink is the weight, in observations, of the pooled acceptance in a
// position's estimate: a position seen a few times stays near the pooled
// value, one seen often follows its own counts.
const shrink = 4

// posDecay weights old observations of a position (a window of about 100):
// a product of per-position estimates needs less noise per factor than the
// pooled α.
const posDecay = 0.99

func newController(k int, adaptive bool) *controller {
	return &controller{k: k, adaptive: adaptive, verify: make([]estimate, k+2), pos: make([]counts, k+1), probeGap: 8}
}

func (c *controller) alpha() float64 { return (c.succ + 1) / (c.succ + c.fail + 2) }

// alphaLow is alpha minus one standard deviation of its estimate (the
// decayed counts as trials), at least 0.
func (c *controller) alphaLow() float64 {
	a := c.alpha()
	return max(0, a-math.Sqrt(a*(1-a)/(c.succ+c.fail+2)))
}

// verifyCost estimates a target pass over n positions: measured, or
// interpolated from 1 position and the widest measured pass, or (nothing
// measured) n times a 1-position pass.
func (c *controller) verifyCost(n int) float64 {
	if e := c.verify[n]; e.n > 0 {
		return e.v
	}
	t1 := c.verify[1].v
	for m := len(c.verify) - 1; m > 1; m-- {
		if e := c.verify[m]; e.n > 0 {
			if c.verify[1].n == 0 {
				return e.v * float64(n) / float64(m)
			}
			return t1 + (e.v-t1)*float64(n-1)/float64(m-1)
		}
	}
	return t1 * float64(n)
}

// samples is how many measurements verifyCost(n) rests on: those of n
// positions, or of the widest measured pass it interpolates from.
func (c *controller) samples(n int) int {
	if e := c.verify[n]; e.n > 0 {
		return e.n
	}
	for m := len(c.verify) - 1; m > 1; m-- {
		if e := c.verify[m]; e.n > 0 {
			return e.n
		}
	}
	return window
}

// expected is the expected tokens of a round of k drafts,
// 1 + α₁ + α₁α₂ + … + α₁…α_k, where α_i estimates the acceptance of draft
// position i given that positions 1..i-1 were accepted: the position's
// decayed counts shrunk toward the estimate of position i-1 (position 1
// toward the pooled α), so a position seen a few times stays near its
// predecessor and an unseen one copies it. With low set every estimate is
// a lower bound: the pooled alphaLow, less one standard deviation of each
// position's own share. Acceptance is rarely independent of the position:
// an n-gram draft that survives its first tokens is repeating earlier text
// and tends to run on, so a single α undervalues long drafts.
func (c *controller) expected(k int, low bool) float64 {
	prior := c.alpha()
	if low {
		prior = c.alphaLow()
	}
	exp, p := 1.0, 1.0
	for i := 1; i <= k; i++ {
		a := prior
		if i < len(c.pos) {
			n := c.pos[i].s + c.pos[i].f
			a = (c.pos[i].s + shrink*prior) / (n + shrink)
			if low {
				a = max(0, a-math.Sqrt(a*(1-a)/(n+shrink))*n/(n+shrink))
			}
		}
		p *= a
		exp += p
		prior = a
	}
	return exp
}

// rate is the expected tokens per second of a round of k drafts.
func (c *controller) rate(k int) float64 { return c.rateAt(k, false) }

// rateAt is rate with the acceptance estimates, or their lower bounds.
func (c *controller) rateAt(k int, low bool) float64 {
	exp := c.expected(k, low)
	cost := c.verifyCost(k+1) + float64(k)*c.draft.v
	if cost <= 0 {
		return 0
	}
	return exp / cost
}

// next returns the draft length of the next round.
func (c *controller) next() int {
	if !c.adaptive {
		return c.k
	}
	// Measure plain passes and speculative ones before choosing (two of
	// each: the first pass after the prompt is cold), and re-measure the
	// plain pass every calibrate rounds while drafting, so the baseline
	// that decides stays current.
	c.rounds++
	if c.verify[1].n < 2 {
		return 0
	}
	if c.draft.n < 2 {
		// One short and one full-length draft: the widest pass anchors
		// verifyCost's interpolation, which a short pass alone would
		// extrapolate linearly (positions that share experts make wide
		// passes far cheaper than that).
		return [2]int{min(2, c.k), c.k}[c.draft.n]
	}
	if c.plain == 0 && c.rounds%calibrate == 0 {
		return 0
	}
	plainRate := c.rate(0)
	bestSpec, bestSpecRate := 1, 0.0
	for k := 1; k <= c.k; k++ {
		if r := c.rate(k); r > bestSpecRate {
			bestSpec, bestSpecRate = k, r
		}
	}
	// Compare with the plain pass's minimum over as many recent samples
	// as the verify cost it is compared with has: a plain pass is measured
	// every round and a wide one a few times, and on a loaded machine the
	// minimum of 8 samples is lower than that of 2, which would keep
	// speculation off for the load's sake.
	if p := c.verify[1].minOf(c.samples(bestSpec + 1)); p > 0 {
		plainRate = 1 / p
	}
	// Turn on with the lower bound of α and a margin; stay on while the
	// estimate beats plain.
	if (c.on && bestSpecRate > plainRate) || c.rateAt(bestSpec, true) > plainRate*(1+onMargin) {
		c.on = true
		c.plain, c.probeGap = 0, 8
		if c.rounds%explore == explore/2 {
			// Explore two positions past the best length once per
			// explore rounds: positions a round never reaches are never
			// measured, and a stale low estimate would keep k short.
			return min(c.k, bestSpec+2)
		}
		return bestSpec
	}
	c.on = false
	c.plain++
	if c.plain >= c.probeGap {
		// Probe sooner while the estimate itself says drafting would pay
		// (only the confidence bound keeps it off), later while it loses.
		c.plain = 0
		if bestSpecRate > plainRate {
			c.probeGap = max(2, c.probeGap/2)
		} else {
			c.probeGap = min(2*c.probeGap, maxProbeGap)
		}
		c.probeGap = max(c.probeGap, min(maxCostGap, int(c.probeCost/probeShare)))
		c.probing = true
		return bestSpec
	}
	return 0
}

// observe records a round: drafted tokens asked for and proposed, accepted,
// the target pass time over positions and the draft time.
func (c *controller) observe(proposed, accepted, positions int, verify, draft time.Duration) {
	if c.probing {
		c.probing = false
		if p := c.verify[1].v; p > 0 {
			c.probeCost = max(0, (verify+draft).Seconds()/p-1-float64(accepted))
		}
	}
	if positions < len(c.verify) {
		c.verify[positions].add(verify.Seconds())
	}
	if proposed > 0 {
		c.draft.add(draft.Seconds() / float64(proposed))
		c.succ = c.succ*decay + float64(accepted)
		c.fail *= decay
		if accepted < proposed {
			c.fail++
		}
		for i := 1; i <= min(accepted+1, proposed, len(c.pos)-1); i++ {
			pc := &c.pos[i]
			pc.s *= posDecay
			pc.f *= posDecay
			if i <= accepted {
				pc.s++
			} else {
				pc.f++
			}
		}
	}
}
