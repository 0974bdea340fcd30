package spec

import (
	"math"
	"time"
)

// controller chooses the draft length of each round. With a fixed K it
// always asks for K. Adaptive, it keeps a decayed estimate of the
// per-token acceptance probability α and measured costs: the target pass
// time per number of positions (in a streaming mode this includes the
// expert reads of the union of the positions' experts, and the reads the
// pass's evictions cost the plain passes after it: see reads) and the
// draft time per proposed token. Each round it takes the k in [0, K] that
// maximises the expected tokens per second
//
//	rate(k) = (1 + α₁ + α₁α₂ + … + α₁…α_k) / (verify(k+1) + k·draft)
//
// with α_i the acceptance of draft position i given the earlier ones
// (see expected: each position's decayed counts shrunk toward the
// position before it),
// where rate(0) is plain decoding, and costs are the smallest of the last 8
// measurements (see estimate). The on/off decision has hysteresis:
// speculation turns on only when the best k beats plain by onMargin with
// lower confidence bounds of the α_i (one standard deviation of the
// decayed acceptance counts), and stays on while it beats plain with the
// estimates themselves. When off, it probes with the best k's draft.
//
// What bounds the cost of being wrong is a ledger (credit), in plain
// passes: every round the controller decodes plainly earns share, every
// drafting round is charged its cost beyond a plain pass less the tokens
// it yielded beyond one,
//
//	charge = (verify(n) + evict(n) + draft time) / verify(1) − (1 + accepted),
//
// negative when the round paid. A round drafts (probe, measurement or
// "on") only while the credit covers its expected charge, and the credit
// is capped at maxCredit. So over any stretch of rounds the drafting
// rounds together cost at most share × the plain rounds + maxCredit + one
// round's charge more than plain decoding would have for the same tokens
// (in the controller's cost estimates): with share = 1% a drafter that
// never pays costs ≤ 1% once settled (TestControllerProbeBound counts it
// in verify positions), and one that pays earns its own probes.
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
	rounds     int
	on         bool // the last choice drafted and was not a probe (hysteresis)
	chose      int  // the last choice
	// credit is the ledger, in plain passes (see the type's doc).
	credit float64
	reads  reads
}

// reads tracks, in a streaming mode, what a verify pass's expert reads
// cost beyond the pass itself: its union of experts evicts experts the
// plain passes after it would have found resident. The pass's own reads
// are in its wall time; the evictions show up as the excess bytes of the
// plain passes right after it over a plain pass after plain passes. That
// excess, per drafted position, is charged to every drafting round
// (evict), and taken out of those plain passes' samples, so the plain
// cost that decides is a plain pass among plain passes.
type reads struct {
	stall, bytes float64 // decayed sums over all passes: seconds per byte
	plain        float64 // decayed mean bytes of a plain pass after plain passes
	plainW       float64
	spill        float64 // decayed mean excess bytes per drafted position of the last drafting round
	spillW       float64
	after        int // positions of the last drafting round while its plain successors are measured
	left         int // plain passes still to measure after it
	excess       float64
}

// spillPasses is how many plain passes after a drafting round count its
// evictions.
const spillPasses = 2

// secPerByte is the measured stall per byte read (0 before any read).
func (r *reads) secPerByte() float64 {
	if r.bytes <= 0 {
		return 0
	}
	return r.stall / r.bytes
}

// evict is the expected extra read time of the plain passes after a
// drafting pass of n positions.
func (r *reads) evict(n int) float64 {
	if n <= 1 || r.spillW == 0 {
		return 0
	}
	return r.spill / r.spillW * float64(n-1) * r.secPerByte()
}

// observe records a pass's reads and returns the part of its time that
// belongs to the drafting round before it (evictions), to be taken out
// of a plain pass's sample.
func (r *reads) observe(positions int, bytes int64, stall time.Duration) float64 {
	if bytes <= 0 && r.bytes == 0 {
		return 0 // resident, or nothing streamed yet
	}
	b := float64(bytes)
	r.stall = float64(r.stall*decay) + stall.Seconds()
	r.bytes = float64(r.bytes*decay) + b
	if positions > 1 {
		r.close()
		r.after, r.left, r.excess = positions, spillPasses, 0
		return 0
	}
	if r.left == 0 {
		r.plain = float64(r.plain*decay) + b
		r.plainW = float64(r.plainW*decay) + 1
		return 0
	}
	x := 0.0
	if r.plainW > 0 {
		x = max(0, b-r.plain/r.plainW)
	}
	r.excess += x
	if r.left--; r.left == 0 {
		r.close()
	}
	return x * r.secPerByte()
}

// close records the excess of a finished (or interrupted) run of plain
// passes after a drafting round.
func (r *reads) close() {
	if r.after > 1 && r.plainW > 0 && r.left < spillPasses {
		r.spill = float64(r.spill*decay) + r.excess/float64(r.after-1)
		r.spillW = float64(r.spillW*decay) + 1
	}
	r.after, r.left = 0, 0
}

// round is what the Decoder reports to the controller after a pass:
// drafted tokens proposed and accepted, the pass's positions, its time and
// the draft time, and in a streaming mode the expert bytes the pass read
// and the time it stalled on them.
type round struct {
	proposed, accepted, positions int
	verify, draft                 time.Duration
	bytes                         int64
	stall                         time.Duration
}

// onMargin is how much the best draft length must beat plain decoding (in
// expected tokens per second, with the lower bound of α) to turn
// speculation on. share is the credit a plain round earns (the bound on
// drafting's overhead, of the plain rounds), maxCredit the credit's cap
// and initCredit its start, in plain passes (the start pays the first
// measuring rounds).
const (
	onMargin   = 0.05
	share      = 0.01
	maxCredit  = 16.0
	initCredit = 4.0
)

// calibrate is how often (in rounds) a drafting controller decodes one
// round plainly to re-measure the plain pass; explore is how often it
// drafts two tokens past the best length, to measure positions the chosen
// rounds never reach.
const (
	calibrate = 32
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
	return &controller{k: k, adaptive: adaptive, verify: make([]estimate, k+2), pos: make([]counts, k+1), credit: initCredit}
}

func (c *controller) alpha() float64 { return (c.succ + 1) / (c.succ + c.fail + 2) }

// alphaLow is alpha minus one standard deviation of its estimate (the
// decayed counts as trials), at least 0.
func (c *controller) alphaLow() float64 {
	a := c.alpha()
	return max(0, a-math.Sqrt(a*(1-a)/(c.succ+c.fail+2)))
}

// verifyCost estimates a target pass over n positions: the plain pass's
// estimate times the pass's measured ratio to it (ratio). Samples of
// wider passes are kept as ratios to the plain estimate at the time, so
// a load that slows every pass alike does not change them.
func (c *controller) verifyCost(n int) float64 {
	p := c.verify[1].v
	if n <= 1 {
		return p
	}
	return p * c.ratio(n)
}

// ratio is a pass of n > 1 positions over a plain pass: the smallest
// estimate of any measured width ≥ n (a pass costs no less than a
// narrower one, so a stale or single high sample of n does not stand
// above a well-measured wider pass), or, with no wider pass measured,
// the widest measured narrower one's extrapolated linearly (n times a
// plain pass with nothing measured).
func (c *controller) ratio(n int) float64 {
	r := math.Inf(1)
	for m := n; m < len(c.verify); m++ {
		if e := c.verify[m]; e.n > 0 {
			r = min(r, e.v)
		}
	}
	if !math.IsInf(r, 1) {
		return r
	}
	for m := n - 1; m > 1; m-- {
		if e := c.verify[m]; e.n > 0 {
			return 1 + (e.v-1)*float64(n-1)/float64(m-1)
		}
	}
	return float64(n)
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
			a = (c.pos[i].s + float64(shrink*prior)) / (n + shrink)
			if low {
				a = max(0, a-math.Sqrt(a*(1-a)/(n+shrink))*n/(n+shrink))
			}
		}
		p = float64(p * a)
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
	cost := c.verifyCost(k+1) + c.reads.evict(k+1) + float64(float64(k)*c.draft.v)
	if cost <= 0 {
		return 0
	}
	return exp / cost
}

// charge is the expected ledger charge of a round of k drafts (see
// controller), in plain passes.
func (c *controller) charge(k int) float64 {
	p := c.verify[1].v
	if k == 0 || p <= 0 {
		return 0
	}
	return (c.verifyCost(k+1)+c.reads.evict(k+1)+float64(float64(k)*c.draft.v))/p - c.expected(k, false)
}

// next returns the draft length of the next round.
func (c *controller) next() int {
	c.chose = c.choose()
	return c.chose
}

func (c *controller) choose() int {
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
		// passes far cheaper than that). They draft while there is
		// credit (initCredit pays for them once).
		if c.credit <= 0 {
			return 0
		}
		return [2]int{min(2, c.k), c.k}[c.draft.n]
	}
	if c.chose != 0 && c.rounds%calibrate == 0 {
		return 0
	}
	plainRate := c.rate(0)
	bestSpec, bestSpecRate := 1, 0.0
	for k := 1; k <= c.k; k++ {
		if r := c.rate(k); r > bestSpecRate {
			bestSpec, bestSpecRate = k, r
		}
	}
	// Turn on with the lower bound of α and a margin; stay on while the
	// estimate beats plain; either way only while the credit is not
	// spent.
	if c.credit >= 0 && ((c.on && bestSpecRate > plainRate) || c.rateAt(bestSpec, true) > plainRate*(1+onMargin)) {
		c.on = true
		switch c.rounds % (2 * explore) {
		case explore / 2:
			// Explore two positions past the best length once per
			// explore rounds, and the full length every other time:
			// positions a round never reaches are never measured, and a
			// stale estimate (the first wide pass of a run is cold)
			// would keep k short.
			return min(c.k, bestSpec+2)
		case 3 * explore / 2:
			return c.k
		}
		return bestSpec
	}
	c.on = false
	// Probe with the round it would run, so the positions that decide are
	// the ones measured, once the credit covers its expected charge (or
	// is full: a probe then costs at most maxCredit plus one round).
	if e := c.charge(bestSpec); c.credit >= min(max(e, 0), maxCredit) && c.credit > 0 {
		return bestSpec
	}
	return 0
}

// plainSample is how often (in plain rounds) a settled controller
// samples a plain pass's cost (see wants).
const plainSample = 4

// wants reports whether the controller uses the cost of the next pass, of
// positions: every drafting pass, and plain passes while the plain
// estimate fills, while speculation is on (its calibration rounds) and
// every plainSample-th round otherwise. A pass it does not want is not
// metered (round.verify < 0): on the host, metering costs two reads of the
// process CPU clock, system calls.
func (c *controller) wants(positions int) bool {
	return positions > 1 || c.on || c.verify[1].n < window || c.rounds%plainSample == 0
}

// observe records a round; r.verify < 0 is a pass that was not metered.
func (c *controller) observe(r round) {
	// A plain pass right after a drafting one has the evictions of that
	// pass in its reads: they are charged to drafting (evict), so they
	// come out of the plain sample.
	verify := r.verify.Seconds()
	spill := c.reads.observe(r.positions, r.bytes, r.stall)
	verify = max(verify/2, verify-spill)
	switch p := c.verify[1].v; {
	case r.verify < 0:
	case r.positions == 1:
		c.verify[1].add(verify)
	case r.positions < len(c.verify) && p > 0:
		c.verify[r.positions].add(verify / p)
	}
	if !c.adaptive {
		return
	}
	if c.chose == 0 {
		c.credit = min(maxCredit, c.credit+share)
	} else if p := c.verify[1].v; p > 0 {
		cost := c.verifyCost(r.positions) + c.reads.evict(r.positions) + r.draft.Seconds()
		c.credit = min(maxCredit, c.credit-(cost/p-1-float64(r.accepted)))
	}
	if r.proposed > 0 {
		c.draft.add(r.draft.Seconds() / float64(r.proposed))
		c.succ = float64(c.succ*decay) + float64(r.accepted)
		c.fail = float64(c.fail * decay)
		if r.accepted < r.proposed {
			c.fail++
		}
		for i := 1; i <= min(r.accepted+1, r.proposed, len(c.pos)-1); i++ {
			pc := &c.pos[i]
			pc.s = float64(pc.s * posDecay)
			pc.f = float64(pc.f * posDecay)
			if i <= r.accepted {
				pc.s++
			} else {
				pc.f++
			}
		}
	}
}
