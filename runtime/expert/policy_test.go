package expert

import (
	"math/rand/v2"
	"testing"
)

func k(l, e int) Key { return Key{int32(l), int32(e)} }

func all(Key) bool { return true }

func TestPolicyVictims(t *testing.T) {
	t.Parallel()
	// Insert 1, 2, 3; access 1 three times, 2 once, 3 twice, then 2 again
	// (2 is now most recent but has 2 uses; 3 has 2 uses, 1 has 3).
	tests := []struct {
		policy string
		want   Key
	}{
		{"lru", k(0, 1)},  // 1 was used least recently
		{"lfu", k(0, 3)},  // 2 and 3 tie at 2 uses; 3 is older
		{"lrfu", k(0, 3)}, // same counts with little decay
	}
	for _, tc := range tests {
		t.Run(tc.policy, func(t *testing.T) {
			p, err := NewPolicy(tc.policy)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range []int{1, 2, 3} {
				p.Insert(k(0, e))
			}
			for _, e := range []int{1, 1, 1, 2, 3, 3, 2} {
				p.Access(k(0, e))
			}
			v, ok := p.Victim(all)
			if !ok || v != tc.want {
				t.Fatalf("victim = %v %v, want %v", v, ok, tc.want)
			}
			// The predicate is honoured.
			v, ok = p.Victim(func(x Key) bool { return x != tc.want })
			if !ok || v == tc.want {
				t.Fatalf("victim with %v excluded = %v %v", tc.want, v, ok)
			}
			p.Remove(tc.want)
			if v, ok := p.Victim(func(x Key) bool { return x == tc.want }); ok {
				t.Fatalf("removed key %v still a victim", v)
			}
			if _, ok := p.Victim(func(Key) bool { return false }); ok {
				t.Fatal("victim found with nothing evictable")
			}
		})
	}
	if _, err := NewPolicy("fifo"); err == nil {
		t.Fatal("unknown policy accepted")
	}
}

func TestLRFUPrefersRecentOverOld(t *testing.T) {
	t.Parallel()
	p := newLRFU(0.001) // half-life of one access
	p.Insert(k(0, 1))
	p.Insert(k(0, 2))
	for range 5 {
		p.Access(k(0, 1)) // popular long ago
	}
	for range 20 {
		p.Access(k(1, 9)) // time passes
	}
	p.Access(k(0, 2)) // once, recently
	if v, _ := p.Victim(all); v != k(0, 1) {
		t.Fatalf("victim = %v, want the stale popular key", v)
	}
}

// randomTrace makes a routing trace with skewed, temporally local choices,
// like a trained router.
func randomTrace(seed uint64, steps, layers, experts, topk int) *RoutingTrace {
	r := rand.New(rand.NewPCG(seed, 1))
	tr := &RoutingTrace{}
	prev := make([][]int, layers)
	for range steps {
		for l := range layers {
			var sel []int
			seen := map[int]bool{}
			for len(sel) < topk {
				var e int
				switch {
				case len(prev[l]) > 0 && r.Float64() < 0.3:
					e = prev[l][r.IntN(len(prev[l]))]
				case r.Float64() < 0.5:
					e = r.IntN(max(1, experts/4))
				default:
					e = r.IntN(experts)
				}
				if !seen[e] {
					seen[e] = true
					sel = append(sel, e)
				}
			}
			prev[l] = sel
			tr.Calls = append(tr.Calls, TraceCall{Layer: l, Experts: sel})
		}
	}
	return tr
}

func TestBeladyIsOptimal(t *testing.T) {
	t.Parallel()
	for seed := range uint64(5) {
		tr := randomTrace(seed, 60, 4, 32, 4)
		for _, capacity := range []int{4, 16, 40, 100} {
			om, total := Simulate(tr, NewOracle(tr), capacity)
			if total != tr.Len() {
				t.Fatalf("simulated %d demands, trace has %d", total, tr.Len())
			}
			for _, name := range PolicyNames() {
				p, _ := NewPolicy(name)
				m, _ := Simulate(tr, p, capacity)
				if om > m {
					t.Fatalf("seed %d capacity %d: belady misses %d > %s misses %d", seed, capacity, om, name, m)
				}
			}
		}
	}
	// With room for everything, only compulsory misses remain.
	tr := randomTrace(9, 20, 2, 8, 2)
	distinct := map[Key]bool{}
	for _, c := range tr.Calls {
		for _, e := range c.Experts {
			distinct[k(c.Layer, e)] = true
		}
	}
	if m, _ := Simulate(tr, NewOracle(tr), 1000); m != len(distinct) {
		t.Fatalf("misses with infinite room = %d, want %d distinct", m, len(distinct))
	}
}

func TestOracleDetectsDivergence(t *testing.T) {
	t.Parallel()
	tr := &RoutingTrace{Calls: []TraceCall{{Layer: 0, Experts: []int{1, 2}}}}
	o := NewOracle(tr)
	o.Access(k(0, 1))
	o.Access(k(0, 3))
	if o.Err() == nil {
		t.Fatal("divergent demand not reported")
	}
	o = NewOracle(tr)
	o.Access(k(0, 1))
	o.Access(k(0, 2))
	o.Access(k(0, 1))
	if o.Err() == nil {
		t.Fatal("demand past the end of the trace not reported")
	}
}

func BenchmarkPolicyVictim(b *testing.B) {
	for _, name := range PolicyNames() {
		b.Run(name, func(b *testing.B) {
			p, _ := NewPolicy(name)
			for e := range 600 {
				p.Insert(k(e%24, e))
				p.Access(k(e%24, e))
			}
			b.ReportAllocs()
			i := 600
			for b.Loop() {
				v, _ := p.Victim(all)
				p.Remove(v)
				p.Insert(k(i%24, i))
				p.Access(k(i%24, i))
				i++
			}
		})
	}
}

func TestOraclePlanReadsWhatMINMisses(t *testing.T) {
	t.Parallel()
	one := func(Key) int64 { return 1 }
	for seed := range uint64(5) {
		tr := randomTrace(seed, 60, 4, 32, 4)
		for _, capacity := range []int{4, 16, 40, 100} {
			o := NewOracle(tr)
			plan, err := o.Plan(one, int64(capacity))
			if err != nil {
				t.Fatal(err)
			}
			min, _ := Simulate(tr, NewOracle(tr), capacity)
			if plan.Reads() != min || plan.Bytes() != int64(min) {
				t.Fatalf("seed %d capacity %d: plan reads %d (%d bytes), Belady misses %d", seed, capacity, plan.Reads(), plan.Bytes(), min)
			}
			for _, name := range PolicyNames() {
				p, _ := NewPolicy(name)
				if m, _ := Simulate(tr, p, capacity); plan.Reads() > m {
					t.Fatalf("seed %d capacity %d: plan reads %d > %s misses %d", seed, capacity, plan.Reads(), name, m)
				}
			}
			// Replaying the plan never exceeds the capacity, serves every
			// demand from a read made before it, and never evicts an
			// expert before its last use preceding the read.
			res := map[Key]bool{}
			for i, f := range plan.fetches {
				for _, v := range f.victims {
					if !res[v] {
						t.Fatalf("fetch %d evicts %v, which is not resident", i, v)
					}
					delete(res, v)
				}
				if res[f.key] {
					t.Fatalf("fetch %d reads resident %v", i, f.key)
				}
				res[f.key] = true
				if len(res) > capacity {
					t.Fatalf("fetch %d: %d resident > capacity %d", i, len(res), capacity)
				}
				if f.after >= f.pos {
					t.Fatalf("fetch %d may start only after its own demand (%d >= %d)", i, f.after, f.pos)
				}
				for p := f.after + 1; p < f.pos; p++ {
					for _, v := range f.victims {
						if o.seq[p] == v {
							t.Fatalf("fetch %d evicts %v, demanded at %d before the fetched demand %d", i, v, p, f.pos)
						}
					}
				}
			}
		}
	}
	// Variable sizes: the budget in bytes holds.
	tr := randomTrace(3, 40, 4, 16, 4)
	size := func(k Key) int64 { return int64(k.Layer + 1) }
	plan, err := NewOracle(tr).Plan(size, 30)
	if err != nil {
		t.Fatal(err)
	}
	var used int64
	res := map[Key]bool{}
	for _, f := range plan.fetches {
		for _, v := range f.victims {
			delete(res, v)
			used -= size(v)
		}
		res[f.key] = true
		used += size(f.key)
		if used > 30 {
			t.Fatalf("plan holds %d bytes > budget 30", used)
		}
	}
	if _, err := NewOracle(tr).Plan(size, 3); err == nil {
		t.Fatal("a budget below one call's experts was accepted")
	}
}
