package expert

import "math"

// nextUse approximates Belady's MIN without knowing the future: it evicts
// the resident expert whose next demand it expects furthest away. A MoE
// model visits its layers in a fixed cycle, once per token, so the next
// chance for an expert of layer l comes when the cycle next reaches l
// (dist(l) layer steps from the layer being served), and each later
// chance one full cycle (L layers) after that. If the expert is demanded
// with probability q at each visit of its layer, its expected next demand
// is dist(l) + L·(1−q)/q steps away. q is learned from the demands: the
// expert's uses over its layer's visits, with an exponential decay of
// halfLife visits (0: none) so a shift in routing is followed, and a
// prior of the layer's mean demand rate so an expert never seen is not
// infinitely far. LFU ranks experts by q alone and ignores where the cycle
// is, which is what MIN exploits: an expert just used is a full cycle
// from its next chance, one of the next layer only a step.
type nextUse struct {
	halfLife float64
	decay    float64 // per visit of the layer
	layers   int     // L, from SetBudget or the largest layer seen + 1
	cur      int     // layer being served
	visit    []float64
	visits   []float64 // per layer: decayed visit count
	demands  []float64 // per layer: decayed demands
	nexp     []int     // per layer: experts seen
	ents     map[Key]*nuEnt
	resident []*nuEnt
	inVisit  map[Key]bool // demanded in the current visit
}

type nuEnt struct {
	k     Key
	count float64 // decayed demands
	at    float64 // visit index of its layer when count was last updated
	idx   int     // position in resident, or -1
}

// newNextUse returns the policy; halfLife is in visits of a layer (tokens).
func newNextUse(halfLife float64) *nextUse {
	p := &nextUse{halfLife: halfLife, decay: 1, ents: map[Key]*nuEnt{}, inVisit: map[Key]bool{}, cur: -1}
	if halfLife > 0 {
		p.decay = math.Exp2(-1 / halfLife)
	}
	return p
}

func (p *nextUse) Name() string { return "nextuse" }

// SetBudget implements BudgetedPolicy: it learns the layer count.
func (p *nextUse) SetBudget(_ int64, expertBytes []int64) error {
	p.layers = len(expertBytes)
	p.grow(len(expertBytes) - 1)
	return nil
}

func (p *nextUse) grow(layer int) {
	for len(p.visit) <= layer {
		p.visit = append(p.visit, 0)
		p.visits = append(p.visits, 0)
		p.demands = append(p.demands, 0)
		p.nexp = append(p.nexp, 0)
	}
	p.layers = max(p.layers, layer+1)
}

func (p *nextUse) ent(k Key) *nuEnt {
	e := p.ents[k]
	if e == nil {
		e = &nuEnt{k: k, idx: -1, at: p.visit[k.Layer]}
		p.ents[k] = e
		p.nexp[k.Layer]++
	}
	return e
}

func (p *nextUse) Access(k Key) {
	l := int(k.Layer)
	p.grow(l)
	if l != p.cur || p.inVisit[k] {
		// A new visit of layer l.
		p.cur = l
		clear(p.inVisit)
		p.visit[l]++
		p.visits[l] = float64(p.visits[l]*p.decay) + 1
		p.demands[l] *= p.decay
	}
	p.inVisit[k] = true
	p.demands[l]++
	e := p.ent(k)
	e.count = p.decayed(e) + 1
	e.at = p.visit[l]
}

func (p *nextUse) Insert(k Key) {
	p.grow(int(k.Layer))
	e := p.ent(k)
	if e.idx < 0 {
		e.idx = len(p.resident)
		p.resident = append(p.resident, e)
	}
}

func (p *nextUse) Remove(k Key) {
	e := p.ents[k]
	if e == nil || e.idx < 0 {
		return
	}
	last := p.resident[len(p.resident)-1]
	p.resident[e.idx] = last
	last.idx = e.idx
	p.resident = p.resident[:len(p.resident)-1]
	e.idx = -1
}

// decayed returns e's demand count decayed to its layer's latest visit.
func (p *nextUse) decayed(e *nuEnt) float64 {
	if p.decay == 1 {
		return e.count
	}
	return e.count * math.Pow(p.decay, p.visit[e.k.Layer]-e.at)
}

// distance returns the expected layer steps to e's next demand.
func (p *nextUse) distance(e *nuEnt) float64 {
	l := int(e.k.Layer)
	L := p.layers
	d := l - p.cur
	if d <= 0 {
		d += L
	}
	n := p.visits[l]
	count := p.decayed(e)
	// Prior: the layer's mean demand rate per expert seen, weight 0.5.
	prior := 0.0
	if n > 0 {
		prior = p.demands[l] / n / float64(max(p.nexp[l], 1))
	}
	q := (count + float64(0.5*prior)) / (n + 0.5)
	if q <= 0 {
		return math.Inf(1)
	}
	if q >= 1 {
		return float64(d)
	}
	return float64(d) + float64(L)*(1-q)/q
}

func (p *nextUse) Victim(evictable func(Key) bool) (Key, bool) {
	var best *nuEnt
	bd := 0.0
	for _, e := range p.resident {
		d := p.distance(e)
		if best != nil && (d < bd || (d == bd && !keyLess(e.k, best.k))) {
			continue
		}
		if evictable(e.k) {
			best, bd = e, d
		}
	}
	if best == nil {
		return Key{}, false
	}
	return best.k, true
}
