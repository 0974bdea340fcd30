package expert

import (
	"container/heap"
	"fmt"
	"math"
)

// oracleFetch is one read of the oracle's schedule: key is read for its
// demand at pos, into the room its victims leave. The read may start once
// the replay has passed position after (the last demand of any victim
// before pos), so no victim is evicted before its last use.
type oracleFetch struct {
	key     Key
	pos     int
	after   int // -1: no victim, the read may start at once
	victims []Key
}

// OraclePlan is the oracle's schedule for a recorded trace under a byte
// budget: the reads of Belady's MIN replacement (a miss evicts the resident
// experts used furthest in the future), each started as early as its
// victims allow. This is Cao et al.'s "conservative" integrated prefetching
// and caching: it reads exactly what MIN reads, the fewest bytes any
// schedule can, and prefetches each of them as far ahead as that allows
// (P. Cao, E. Felten, A. Karlin, K. Li, "A Study of Integrated Prefetching
// and Caching Strategies", SIGMETRICS 1995). Prefetching further ahead by
// evicting experts still needed would read more bytes than MIN.
type OraclePlan struct {
	fetches []oracleFetch
	bytes   int64 // bytes the plan reads
}

// Reads returns the number of reads the plan makes.
func (p *OraclePlan) Reads() int { return len(p.fetches) }

// Bytes returns the bytes the plan reads.
func (p *OraclePlan) Bytes() int64 { return p.bytes }

// Plan computes the oracle's schedule for budget bytes of experts, where
// size gives the bytes one expert of a layer occupies. Experts of the call
// being served are evicted only when nothing else can make room, and only
// those already demanded in it.
func (o *Oracle) Plan(size func(Key) int64, budget int64) (*OraclePlan, error) {
	type res struct {
		next, last int
	}
	resident := map[Key]res{}
	h := &nextUseHeap{}
	var used int64
	plan := &OraclePlan{}
	nextAfter := make([]int, len(o.seq)) // next position of the same key, or MaxInt
	seen := map[Key]int{}
	for p := len(o.seq) - 1; p >= 0; p-- {
		if n, ok := seen[o.seq[p]]; ok {
			nextAfter[p] = n
		} else {
			nextAfter[p] = math.MaxInt
		}
		seen[o.seq[p]] = p
	}
	callStart := 0
	var aside []heapItem
	for c, end := range o.callEnd {
		for p := callStart; p < end; p++ {
			k := o.seq[p]
			if r, ok := resident[k]; ok {
				resident[k] = res{next: nextAfter[p], last: p}
				if r.next != nextAfter[p] {
					heap.Push(h, heapItem{next: nextAfter[p], key: k})
				}
				continue
			}
			sz := size(k)
			f := oracleFetch{key: k, pos: p, after: -1}
			aside = aside[:0]
			for used+sz > budget {
				var it heapItem
				var r res
				found := false
				for h.Len() > 0 {
					it = heap.Pop(h).(heapItem)
					rr, ok := resident[it.key]
					if !ok || rr.next != it.next {
						continue // stale
					}
					if rr.last >= callStart {
						// Demanded by this call: keep it while anything else can go.
						aside = append(aside, it)
						continue
					}
					r, found = rr, true
					break
				}
				if !found {
					if len(aside) == 0 {
						return nil, fmt.Errorf("expert: oracle: call %d (layer %d) needs more than the %d-byte budget", c, k.Layer, budget)
					}
					it, aside = aside[0], aside[1:]
					r = resident[it.key]
				}
				delete(resident, it.key)
				used -= size(it.key)
				f.victims = append(f.victims, it.key)
				f.after = max(f.after, r.last)
			}
			for _, it := range aside {
				heap.Push(h, it)
			}
			resident[k] = res{next: nextAfter[p], last: p}
			heap.Push(h, heapItem{next: nextAfter[p], key: k})
			used += sz
			plan.fetches = append(plan.fetches, f)
			plan.bytes += sz
		}
		callStart = end
	}
	return plan, nil
}

type heapItem struct {
	next int
	key  Key
}

// nextUseHeap is a max-heap on next use (ties: the smaller key first, so
// plans are deterministic).
type nextUseHeap []heapItem

func (h nextUseHeap) Len() int { return len(h) }
func (h nextUseHeap) Less(i, j int) bool {
	if h[i].next != h[j].next {
		return h[i].next > h[j].next
	}
	return keyLess(h[i].key, h[j].key)
}
func (h nextUseHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *nextUseHeap) Push(x any)   { *h = append(*h, x.(heapItem)) }
func (h *nextUseHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	*h = old[:len(old)-1]
	return it
}
