package model

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/lesfarm/lesfarm/runtime/moe"
	"github.com/lesfarm/lesfarm/runtime/tensor"
)

// With several threads and experts held in memory (moe.Direct), a layer's
// experts are split between the threads by whole expert, each thread
// running its experts' products alone, instead of every expert's rows
// being split between all threads: a prefill layer runs some 200 experts
// of one to a few positions each, and a decode layer 8 of one position,
// whose products are too small to share without the threads waiting for
// each other at every one. The experts are handed out heaviest first
// (most positions), from a shared counter, so the threads stay balanced.
// The shared expert of a qwen35moe layer is one more task of the same run.
// Every product computes the same values with the same kernels as on the
// pool (products split rows, never the sums within a row), so the outputs
// are bit-identical whatever the thread count.

// sharedFFN is a layer's shared expert handed to moe: gate and up over all
// the layer's rows (sc.rows), SiLU, down into d. moe sets done when it ran
// it with the routed experts; otherwise the caller runs it.
type sharedFFN struct {
	gate, up, down *tensor.Matrix
	g, u, d        []float32 // n × FFN, n × FFN, n × Hidden
	done           bool
}

// expertSlot is one thread's scratch in expertPar.
type expertSlot struct {
	g, u []float32
	sel  []int32
	dst  [2][]float32
	ms   [2]tensor.Matrix
	err  error
}

// expertPar is a layer's expert run split by expert between the pool's
// threads (see above).
type expertPar struct {
	s      *State
	src    moe.Direct
	li     int
	shared *sharedFFN
	all    []int32 // 0..n-1: the shared expert's rows
	order  []int32 // tasks, heaviest first: index into sc.union, or -1 (shared)
	next   atomic.Int32
	ids    atomic.Int32
	slots  []expertSlot
	run    func(lo, hi int) // work, bound once (a method value allocates)
}

// expertsParallel runs layer li's routed experts (and sh, if not nil) split
// by expert between the threads, if the model has several threads and its
// Source holds every expert in memory; it returns false, having done
// nothing, otherwise.
func (s *State) expertsParallel(ctx context.Context, li, n int, sh *sharedFFN) (bool, error) {
	m := s.m
	sc := &s.sc
	src, ok := m.Experts.(moe.Direct)
	if !ok || m.threads < 2 || len(sc.union)+boolInt(sh != nil) < 2 {
		return false, nil
	}
	shp := &m.Layers[li].Shape
	types := []tensor.Type{shp.GateType, shp.UpType}
	if sh != nil {
		types = append(types, sh.gate.Type, sh.up.Type)
	}
	if !sc.rows.Prepare(types...) {
		return false, nil
	}
	if err := ctx.Err(); err != nil {
		return true, err
	}
	p := sc.par
	if p == nil {
		p = &expertPar{s: s}
		p.run = p.work
		sc.par = p
	}
	p.src, p.li, p.shared = src, li, sh
	p.order = p.order[:0]
	for i := range sc.union {
		p.order = append(p.order, int32(i))
	}
	if sh != nil {
		p.all = grow(p.all, n)
		for i := range p.all {
			p.all[i] = int32(i)
		}
		p.order = append(p.order, -1)
	}
	slices.SortStableFunc(p.order, func(a, b int32) int { return p.weight(b) - p.weight(a) })
	p.next.Store(0)
	p.ids.Store(0)
	slots := 4 * m.threads // at most one per chunk of the For below
	if len(p.slots) < slots {
		p.slots = make([]expertSlot, slots)
	}
	m.pool.For(slots, p.run)
	p.src, p.shared = nil, nil
	var err error
	for i := range p.slots {
		if e := p.slots[i].err; e != nil && err == nil {
			err = e
		}
		p.slots[i].err = nil
	}
	if sh != nil && err == nil {
		sh.done = true
	}
	return true, err
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// weight is task t's positions (its cost, roughly: every expert streams
// the same bytes, and computes per position).
func (p *expertPar) weight(t int32) int {
	if t < 0 {
		return len(p.all)
	}
	return len(p.s.sc.assign[p.s.sc.union[t]])
}

// work is one thread's part: it takes a slot of scratch, then tasks from
// the shared counter until none are left. The For chunk it is called for
// only decides that it runs, not what it computes.
func (p *expertPar) work(_, _ int) {
	slot := &p.slots[p.ids.Add(1)-1]
	for {
		k := int(p.next.Add(1) - 1)
		if k >= len(p.order) {
			return
		}
		if slot.err != nil {
			continue
		}
		if t := p.order[k]; t < 0 {
			slot.err = p.sharedExpert(slot)
		} else {
			slot.err = p.expert(slot, int(t))
		}
	}
}

// expert computes expert sc.union[i] for its positions into its run of
// sc.eout, as runExpert does, on the calling thread alone.
func (p *expertPar) expert(slot *expertSlot, i int) error {
	s := p.s
	m := s.m
	sc := &s.sc
	e := sc.union[i]
	w := p.src.Expert(p.li, e)
	sh := &m.Layers[p.li].Shape
	H, K := m.Hidden, m.ExpertsUsed
	rows := sc.assign[e]
	cnt := len(rows)
	slot.sel = grow(slot.sel, cnt)
	for j, r := range rows {
		slot.sel[j] = r / int32(K)
	}
	gate, up, down := w.Matrices(sh)
	b := int(sc.ebase[e])
	if err := slot.ffn(&gate, &up, &down, &sc.rows, slot.sel, sc.eout[b*H:(b+cnt)*H]); err != nil {
		return fmt.Errorf("expert %d: %w", e, err)
	}
	return nil
}

// sharedExpert computes the shared expert over all rows into p.shared.
func (p *expertPar) sharedExpert(slot *expertSlot) error {
	sh := p.shared
	n := len(p.all)
	F := sh.gate.Rows
	if err := slot.ffnInto(sh.gate, sh.up, sh.down, &p.s.sc.rows, p.all, sh.g[:n*F], sh.u[:n*F], sh.d); err != nil {
		return fmt.Errorf("shared expert: %w", err)
	}
	return nil
}

// ffn computes down·(silu(gate·x) ⊙ up·x) of rows sel of r into out, on
// the calling thread, in the slot's scratch.
func (slot *expertSlot) ffn(gate, up, down *tensor.Matrix, r *tensor.Rows, sel []int32, out []float32) error {
	cnt, F := len(sel), gate.Rows
	slot.g = grow(slot.g, cnt*F)
	slot.u = grow(slot.u, cnt*F)
	return slot.ffnInto(gate, up, down, r, sel, slot.g, slot.u, out)
}

// ffnInto is ffn with gate and up written to g and u.
func (slot *expertSlot) ffnInto(gate, up, down *tensor.Matrix, r *tensor.Rows, sel []int32, g, u, out []float32) error {
	cnt := len(sel)
	slot.dst[0], slot.dst[1] = g, u
	slot.ms[0], slot.ms[1] = *gate, *up
	err := tensor.MatMulMultiRows(nil, slot.dst[:], slot.ms[:], r, sel)
	slot.dst, slot.ms = [2][]float32{}, [2]tensor.Matrix{}
	if err != nil {
		return fmt.Errorf("gate/up: %w", err)
	}
	tensor.SiLUMul(g, u)
	if cnt == 1 {
		err = tensor.MatVec(nil, out[:down.Rows], *down, g[:down.Cols])
	} else {
		err = tensor.MatMul(nil, out[:cnt*down.Rows], *down, g, cnt)
	}
	if err != nil {
		return fmt.Errorf("down: %w", err)
	}
	return nil
}
