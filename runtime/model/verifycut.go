package model

import "github.com/lesfarm/lesfarm/runtime/moe"

// verifyCut implements State.CutVerify for MoE layer li of a pass over n
// positions whose top-k experts are in sc.topk: it returns the number of
// positions the pass keeps computing. Position 0 is always kept with all
// its experts. Position i >= 1 is kept while at most State.CutSlack of its
// experts are neither available in the Source without a new read
// (moe.Residency) nor needed by a position before it; the first position
// that would add more reads ends the pass there, for this layer and every
// later one.
//
// Dropping the tail of a pass never changes the positions kept: attention
// is causal and the expert outputs are per position, so the kept
// positions' hidden states and logits are bit-identical to the full
// pass's. Speculative verification uses it so that drafted positions only
// ride on experts that are already resident or needed anyway, instead of
// reading (and evicting for) experts that only a draft, often rejected,
// would use. The dropped positions' KV entries of earlier layers lie past
// the new end of the cache and are overwritten later.
func (s *State) verifyCut(li, n int) int {
	if !s.CutVerify || n < 2 || !s.m.arch.cutsVerify() {
		return n
	}
	r, ok := s.m.Experts.(moe.Residency)
	if !ok {
		return n
	}
	sc := &s.sc
	E, K := s.m.ExpertCount, s.m.ExpertsUsed
	sc.cutNeed = grow(sc.cutNeed, E)
	clear(sc.cutNeed)
	for _, e := range sc.topk[:K] {
		sc.cutNeed[e] = true
	}
	for i := 1; i < n; i++ {
		idx := sc.topk[i*K : (i+1)*K]
		reads := 0
		for _, e := range idx {
			if !sc.cutNeed[e] && !r.Resident(li, e) {
				reads++
			}
		}
		if reads > s.CutSlack {
			s.Cut += n - i
			s.keep = i
			return i
		}
		for _, e := range idx {
			sc.cutNeed[e] = true
		}
	}
	return n
}
