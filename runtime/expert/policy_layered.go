package expert

import (
	"errors"
	"fmt"
	"slices"
)

// layered splits the budget into per-layer quotas and keeps an LFU policy
// per layer: a victim comes from the layer being served when that layer is
// at its quota, else from the layer furthest over its quota. Without fixed
// quotas (NewLayeredPolicy with nil) it learns them from the demands it
// sees: after every cycle of the layers it hands out expert slots, one at
// a time, to the layer whose next slot would serve the most demands per
// byte (the demand count of its next most popular expert not yet given a
// slot), so a layer whose experts are reused more gets more of the cache.
type layered struct {
	budget  int64
	sizes   []int64
	quota   []int64 // bytes per layer
	fixed   bool
	used    []int64
	inner   []*lfu
	counts  []map[int32]int64 // per layer: demands per expert
	cur     int               // layer of the latest demand
	demands int               // since the last replan
	where   map[Key]int64     // resident keys and their sizes
}

// NewLayeredPolicy returns the per-layer policy. quotas, if not nil, fixes
// each layer's share in bytes (SetBudget then checks that they fit the
// budget); nil learns them from the demands.
func NewLayeredPolicy(quotas []int64) Policy {
	return &layered{quota: slices.Clone(quotas), fixed: quotas != nil, where: map[Key]int64{}}
}

func (p *layered) Name() string { return "layered" }

// ErrLayerBudget is returned (wrapped) when per-layer quotas do not fit.
var ErrLayerBudget = errors.New("expert: per-layer allocation does not fit")

// SetBudget implements BudgetedPolicy.
func (p *layered) SetBudget(budget int64, expertBytes []int64) error {
	p.budget, p.sizes = budget, slices.Clone(expertBytes)
	n := len(expertBytes)
	p.used = make([]int64, n)
	p.inner = make([]*lfu, n)
	p.counts = make([]map[int32]int64, n)
	for l := range n {
		p.inner[l] = newLFU()
		p.counts[l] = map[int32]int64{}
	}
	if p.fixed {
		if len(p.quota) != n {
			return fmt.Errorf("%w: %d per-layer budgets for %d layers", ErrLayerBudget, len(p.quota), n)
		}
		var sum int64
		for l, q := range p.quota {
			if q < 0 {
				return fmt.Errorf("%w: layer %d's budget %d is negative", ErrLayerBudget, l, q)
			}
			sum += q
		}
		if sum > budget {
			return fmt.Errorf("%w: the per-layer budgets sum to %d bytes, over the %d-byte budget", ErrLayerBudget, sum, budget)
		}
		return nil
	}
	// Until demands are seen: an equal share per layer with experts.
	p.quota = make([]int64, n)
	withExperts := 0
	for _, b := range expertBytes {
		if b > 0 {
			withExperts++
		}
	}
	for l, b := range expertBytes {
		if b > 0 {
			p.quota[l] = budget / int64(withExperts)
		}
	}
	return nil
}

// ready grows the per-layer state to hold layer l (without SetBudget an
// expert counts as one byte and every quota is 0, so victims come from the
// layer holding the most) and reports whether l is a valid layer.
func (p *layered) ready(l int) bool {
	if l < 0 || l >= 1<<16 {
		return false
	}
	for len(p.inner) <= l {
		p.inner = append(p.inner, newLFU())
		p.counts = append(p.counts, map[int32]int64{})
		p.used = append(p.used, 0)
		p.sizes = append(p.sizes, 1)
		if !p.fixed || len(p.quota) < len(p.inner) {
			p.quota = append(p.quota, 0)
		}
	}
	return true
}

func (p *layered) Insert(k Key) {
	l := int(k.Layer)
	if !p.ready(l) {
		return
	}
	if _, ok := p.where[k]; !ok {
		p.where[k] = p.sizes[l]
		p.used[l] += p.sizes[l]
	}
	p.inner[l].Insert(k)
}

func (p *layered) Access(k Key) {
	l := int(k.Layer)
	if !p.ready(l) {
		return
	}
	if l < p.cur && !p.fixed {
		p.replan() // a new cycle of the layers
	}
	p.cur = l
	p.counts[l][k.Expert]++
	p.demands++
	p.inner[l].Access(k)
}

func (p *layered) Remove(k Key) {
	l := int(k.Layer)
	if !p.ready(l) {
		return
	}
	if sz, ok := p.where[k]; ok {
		delete(p.where, k)
		p.used[l] -= sz
	}
	p.inner[l].Remove(k)
}

func (p *layered) Victim(evictable func(Key) bool) (Key, bool) {
	if p.ready(p.cur) && p.used[p.cur] >= p.quota[p.cur] {
		if k, ok := p.inner[p.cur].Victim(evictable); ok {
			return k, true
		}
	}
	order := make([]int, 0, len(p.inner))
	for l := range p.inner {
		if p.used[l] > 0 {
			order = append(order, l)
		}
	}
	slices.SortFunc(order, func(a, b int) int {
		oa, ob := p.used[a]-p.quota[a], p.used[b]-p.quota[b]
		if oa != ob {
			if oa > ob {
				return -1
			}
			return 1
		}
		return a - b
	})
	for _, l := range order {
		if k, ok := p.inner[l].Victim(evictable); ok {
			return k, true
		}
	}
	return Key{}, false
}

// replan sets the quotas from the demand counts (see layered).
func (p *layered) replan() {
	if p.demands == 0 || p.budget == 0 {
		return
	}
	p.demands = 0
	p.quota = AllocateLayers(p.counts, p.sizes, p.budget, nil)
}

// AllocateLayers splits budget into per-layer byte quotas: expert slots go,
// one at a time, to the layer whose next slot serves the most weighted
// demands per byte, where counts[l] holds each expert's demands in layer l
// and a demand in layer l weighs weight[l] (nil: 1). Weighting a layer by
// 2 − recall, for a lookahead predictor of that recall, favours the layers
// whose misses the predictor cannot hide. The quotas sum to at most
// budget.
func AllocateLayers(counts []map[int32]int64, sizes []int64, budget int64, weight []float64) []int64 {
	n := len(sizes)
	sorted := make([][]int64, n)
	for l := range n {
		if l < len(counts) {
			for _, c := range counts[l] {
				sorted[l] = append(sorted[l], c)
			}
		}
		slices.SortFunc(sorted[l], func(a, b int64) int { return int(b - a) })
	}
	quota := make([]int64, n)
	next := make([]int, n)
	left := budget
	for {
		best, bv := -1, 0.0
		for l := range n {
			if sizes[l] <= 0 || sizes[l] > left || next[l] >= len(sorted[l]) {
				continue
			}
			w := 1.0
			if weight != nil {
				w = weight[l]
			}
			v := w * float64(sorted[l][next[l]]) / float64(sizes[l])
			if best < 0 || v > bv {
				best, bv = l, v
			}
		}
		if best < 0 {
			break
		}
		quota[best] += sizes[best]
		left -= sizes[best]
		next[best]++
	}
	// Room no seen expert needs: share it out so every layer can grow.
	for l := range n {
		if sizes[l] > 0 && left >= sizes[l] {
			quota[l] += sizes[l]
			left -= sizes[l]
		}
	}
	return quota
}
