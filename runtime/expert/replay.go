package expert

import (
	"fmt"
	"slices"
)

// CacheReplay is what a cache-only replay of a routing trace measured: the
// demands served, how many hit, and the reads (and their bytes) the misses
// cost. There is no prefetching and no timing: it is the cache's share of
// a run's bytes.
type CacheReplay struct {
	Policy    string
	Budget    int64
	Demands   int64
	Hits      int64
	Reads     int64
	BytesRead int64
}

// HitRate returns Hits/Demands.
func (r CacheReplay) HitRate() float64 { return ratio(r.Hits, r.Demands) }

// ReplayCache replays the demands of tr through policy p with room for
// budget bytes of experts, where sizes[l] is the bytes of one expert of
// layer l. Every miss
// reads its expert; to make room it evicts the policy's victim among the
// experts the current call does not demand, and only when nothing else can
// go one the call demanded already (as the store and MIN's plan do). If p
// needs the budget (BudgetedPolicy) it is configured first. It fails when
// one call needs more than the budget holds.
func ReplayCache(tr *RoutingTrace, sizes []int64, p Policy, budget int64) (CacheReplay, error) {
	if err := configurePolicy(p, budget, sizes); err != nil {
		return CacheReplay{}, err
	}
	size := func(k Key) int64 { return sizes[k.Layer] }
	r := CacheReplay{Policy: p.Name(), Budget: budget}
	resident := map[Key]bool{}
	var used int64
	var cur []Key // the current call's demands so far
	for ci, c := range tr.Calls {
		if c.Prefetch {
			continue
		}
		if c.Layer < 0 || c.Layer >= len(sizes) {
			return r, fmt.Errorf("expert: replay: call %d names layer %d of %d", ci, c.Layer, len(sizes))
		}
		cur = cur[:0]
		inCall := func(k Key) bool {
			return slices.Contains(c.Experts, int(k.Expert)) && int(k.Layer) == c.Layer
		}
		for _, e := range c.Experts {
			k := Key{int32(c.Layer), int32(e)}
			r.Demands++
			p.Access(k)
			if resident[k] {
				r.Hits++
				cur = append(cur, k)
				continue
			}
			sz := size(k)
			for used+sz > budget {
				v, ok := p.Victim(func(x Key) bool { return !inCall(x) })
				if !ok {
					v, ok = p.Victim(func(x Key) bool { return slices.Contains(cur, x) })
				}
				if !ok {
					return r, fmt.Errorf("expert: replay: call %d (layer %d) needs more than the %d-byte budget", ci, c.Layer, budget)
				}
				p.Remove(v)
				delete(resident, v)
				used -= size(v)
			}
			resident[k] = true
			used += sz
			p.Insert(k)
			r.Reads++
			r.BytesRead += sz
			cur = append(cur, k)
		}
	}
	return r, nil
}

// ReplayMIN returns what Belady's MIN reads for tr under the same model as
// ReplayCache: the oracle's plan (OraclePlan), the fewest bytes any policy
// can read.
func ReplayMIN(tr *RoutingTrace, sizes []int64, budget int64) (CacheReplay, error) {
	for ci, c := range tr.Calls {
		if c.Layer < 0 || c.Layer >= len(sizes) {
			return CacheReplay{}, fmt.Errorf("expert: replay: call %d names layer %d of %d", ci, c.Layer, len(sizes))
		}
	}
	o := NewOracle(tr)
	plan, err := o.Plan(func(k Key) int64 { return sizes[k.Layer] }, budget)
	if err != nil {
		return CacheReplay{}, err
	}
	return CacheReplay{Policy: "min", Budget: budget, Demands: int64(len(o.seq)), Hits: int64(len(o.seq) - plan.Reads()), Reads: int64(plan.Reads()), BytesRead: plan.Bytes()}, nil
}

// Repeat returns tr's calls n times over, as a ladder replays one run's
// routing for every repetition.
func (t *RoutingTrace) Repeat(n int) *RoutingTrace {
	out := &RoutingTrace{Calls: make([]TraceCall, 0, n*len(t.Calls))}
	for range n {
		out.Calls = append(out.Calls, t.Calls...)
	}
	return out
}

// RankPrecision measures the lookahead predictor recorded in t: for each
// layer and rank, how many of the ranked predictions (Prefetch calls of at
// most maxRanked experts, one token's, in rank order) the layer's next Use
// demanded. It returns hits[layer][rank] and seen[layer][rank].
func (t *RoutingTrace) RankPrecision(layers, maxRanked int) (hits, seen [][]int64) {
	hits, seen = make([][]int64, layers), make([][]int64, layers)
	pending := make([][]int, layers)
	for _, c := range t.Calls {
		if c.Layer < 0 || c.Layer >= layers {
			continue
		}
		if c.Prefetch {
			pending[c.Layer] = nil
			if len(c.Experts) <= maxRanked {
				pending[c.Layer] = c.Experts
			}
			continue
		}
		p := pending[c.Layer]
		pending[c.Layer] = nil
		for len(seen[c.Layer]) < len(p) {
			seen[c.Layer] = append(seen[c.Layer], 0)
			hits[c.Layer] = append(hits[c.Layer], 0)
		}
		for r, x := range p {
			seen[c.Layer][r]++
			if slices.Contains(c.Experts, x) {
				hits[c.Layer][r]++
			}
		}
	}
	return hits, seen
}
