package expert

import (
	"errors"
	"strings"
	"testing"
)

// TestARCAdapts: a demand that finds its key in t1's ghost list grows t1's
// target and puts the key in t2; a key seen twice survives a scan of keys
// seen once.
func TestARCAdapts(t *testing.T) {
	t.Parallel()
	p := newARC()
	if err := p.SetBudget(300, []int64{100}); err != nil {
		t.Fatal(err)
	}
	ins := func(e int) { p.Access(k(0, e)); p.Insert(k(0, e)) }
	ins(1)
	p.Access(k(0, 1)) // 1 is now frequent (t2)
	ins(2)
	ins(3)
	// A scan of one-time keys evicts among them, never 1.
	var last Key
	for e := 4; e < 10; e++ {
		v, ok := p.Victim(all)
		if !ok || v == k(0, 1) {
			t.Fatalf("scan key %d: victim %v %v, want a one-time key", e, v, ok)
		}
		p.Remove(v)
		last = v
		ins(e)
	}
	// The ghost of the latest evicted one-time key, demanded again, raises
	// t1's target.
	before := p.p
	p.Access(last)
	if p.p <= before {
		t.Fatalf("a t1 ghost hit left p at %v (was %v)", p.p, before)
	}
	v, _ := p.Victim(all)
	p.Remove(v)
	p.Insert(last)
	if n := p.where[last]; n == nil || n.list != p.t2 {
		t.Fatal("a ghost hit was not inserted as frequent")
	}
}

// TestNextUseFollowsTheLayerCycle: of two experts equally popular, the one
// whose layer just ran (a full cycle from its next chance) is evicted, not
// the one of the next layer; and a rarely used expert goes before both.
func TestNextUseFollowsTheLayerCycle(t *testing.T) {
	t.Parallel()
	p := newNextUse(0)
	if err := p.SetBudget(1000, []int64{1, 1, 1, 1}); err != nil {
		t.Fatal(err)
	}
	// Four tokens over 4 layers; expert 0 of every layer used every token,
	// expert 1 of layer 3 once.
	for tok := range 4 {
		for l := range 4 {
			p.Access(k(l, 0))
			if l == 3 && tok == 0 {
				p.Access(k(3, 1))
			}
		}
	}
	p.Access(k(0, 0)) // token 5 starts: layer 0 runs
	for _, x := range []Key{k(0, 0), k(1, 0), k(3, 0), k(3, 1)} {
		p.Insert(x)
	}
	if v, _ := p.Victim(all); v != k(3, 1) {
		t.Fatalf("victim %v, want the rarely used layer 3 expert 1", v)
	}
	p.Remove(k(3, 1))
	if v, _ := p.Victim(all); v != k(0, 0) {
		t.Fatalf("victim %v, want layer 0's expert (its next chance is a cycle away)", v)
	}
	if v, _ := p.Victim(func(x Key) bool { return x != k(0, 0) }); v != k(3, 0) {
		t.Fatalf("victim %v, want layer 3's expert (3 steps) before layer 1's (1 step)", v)
	}
}

// TestLayeredQuotas: with fixed quotas a victim comes from the layer over
// its quota; learned quotas give the layer with more reuse more room.
func TestLayeredQuotas(t *testing.T) {
	t.Parallel()
	p := NewLayeredPolicy([]int64{100, 300}).(*layered)
	if err := p.SetBudget(400, []int64{100, 100}); err != nil {
		t.Fatal(err)
	}
	for _, x := range []Key{k(0, 1), k(0, 2), k(1, 1), k(1, 2)} {
		p.Access(x)
		p.Insert(x)
	}
	p.Access(k(1, 3)) // layer 1 is being served and below its quota
	v, ok := p.Victim(all)
	if !ok || v.Layer != 0 {
		t.Fatalf("victim %v, want one of layer 0 (over its 100-byte quota)", v)
	}
	// Learned: layer 1's experts are reused, layer 0's never.
	counts := []map[int32]int64{{1: 1, 2: 1, 3: 1, 4: 1}, {1: 9, 2: 8, 3: 7, 4: 6}}
	q := AllocateLayers(counts, []int64{100, 100}, 500, nil)
	if q[1] < 400 || q[0]+q[1] > 500 {
		t.Fatalf("quotas %v, want layer 1 to get its four reused experts", q)
	}
	// Weighting layer 0 (a poorly predicted layer) moves room to it.
	w := AllocateLayers(counts, []int64{100, 100}, 500, []float64{10, 1})
	if w[0] <= q[0] {
		t.Fatalf("weighted quotas %v, unweighted %v", w, q)
	}
	// Quotas over the budget are refused with one line.
	err := NewLayeredPolicy([]int64{300, 300}).(*layered).SetBudget(400, []int64{100, 100})
	if !errors.Is(err, ErrLayerBudget) || !strings.Contains(err.Error(), "sum to 600 bytes, over the 400-byte budget") {
		t.Fatalf("quotas over the budget: %v", err)
	}
	if err := NewLayeredPolicy([]int64{100}).(*layered).SetBudget(400, []int64{100, 100}); !errors.Is(err, ErrLayerBudget) {
		t.Fatalf("quotas for the wrong number of layers: %v", err)
	}
}

func TestStoreLayerBudgets(t *testing.T) {
	t.Parallel()
	m := newTestModel(t, 2, 8, 16, 16, true)
	one := planRead(m.layout.Experts[0][0], 1).size
	if _, err := New(m.path, m.layout, m.shapes, Options{Mode: Scheduled, Budget: 4 * one, LayerBudgets: []int64{3 * one, 3 * one}}); !errors.Is(err, ErrLayerBudget) {
		t.Fatalf("per-layer budgets over the budget: %v", err)
	}
	if _, err := New(m.path, m.layout, m.shapes, Options{Mode: Scheduled, Budget: 4 * one, Policy: "lru", LayerBudgets: []int64{one, one}}); err == nil || !strings.Contains(err.Error(), "need the layered policy") {
		t.Fatalf("per-layer budgets with another policy: %v", err)
	}
	s, err := New(m.path, m.layout, m.shapes, Options{Mode: Scheduled, Budget: 6 * one, LayerBudgets: []int64{2 * one, 4 * one}, Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	tr := randomTrace(2, 10, 2, 8, 2)
	drive(t, s, m, tr, 1)
	if st := s.Meter().Stats(); st.PeakBytes > 6*one || st.Demanded != int64(tr.Len()) {
		t.Fatalf("peak %d (budget %d), demanded %d of %d", st.PeakBytes, 6*one, st.Demanded, tr.Len())
	}
}
