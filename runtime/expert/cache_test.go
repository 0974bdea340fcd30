package expert

import "testing"

// TestCacheEvictable: what the cache lets eviction take — only resident
// entries that are not pinned and not demanded by the current Use without
// having been computed in it; a prefetch also spares the layer it is for,
// the layer before it (being computed) and unused prefetches.
func TestCacheEvictable(t *testing.T) {
	t.Parallel()
	c := newCache(1<<20, newLRU())
	c.useSeq = 5
	for _, tc := range []struct {
		name         string
		key          Key
		state, pins  int
		demand, done uint64 // the Use that demanded it last, computed it last
		spec         bool   // a prefetch not used yet
		evict        bool   // evictable
		specEvict    bool   // evictable by a prefetch for layer 3
	}{
		{name: "resident", key: Key{0, 1}, state: stReady, evict: true, specEvict: true},
		{name: "queued", key: Key{0, 1}, state: stQueued},
		{name: "reading", key: Key{0, 1}, state: stReading},
		{name: "failed", key: Key{0, 1}, state: stFailed},
		{name: "pinned", key: Key{0, 1}, state: stReady, pins: 1},
		{name: "demanded-not-computed", key: Key{0, 1}, state: stReady, demand: 5, done: 4},
		{name: "demanded-and-computed", key: Key{0, 1}, state: stReady, demand: 5, done: 5, evict: true, specEvict: true},
		{name: "demanded-earlier", key: Key{0, 1}, state: stReady, demand: 4, done: 3, evict: true, specEvict: true},
		{name: "target-layer", key: Key{3, 1}, state: stReady, evict: true},
		{name: "layer-being-computed", key: Key{2, 1}, state: stReady, evict: true},
		{name: "unused-prefetch", key: Key{0, 1}, state: stReady, spec: true, evict: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := &entry{key: tc.key, state: tc.state, pins: tc.pins, demandSeq: tc.demand, doneSeq: tc.done}
			e.spec.Store(tc.spec)
			if got := c.evictable(e); got != tc.evict {
				t.Errorf("evictable = %v, want %v", got, tc.evict)
			}
			if got := c.specEvictable(e, 3); got != tc.specEvict {
				t.Errorf("specEvictable = %v, want %v", got, tc.specEvict)
			}
		})
	}
}

// TestCacheAllocEvictsByPolicy: alloc evicts the policy's victims among
// the entries ok accepts until the buffer fits, gives up when none is
// left, and a failed read's entry leaves the cache (drop) but keeps its
// buffer until unpinned.
func TestCacheAllocEvictsByPolicy(t *testing.T) {
	t.Parallel()
	c := newCache(3*100, newLRU())
	add := func(k Key) *entry {
		buf, ok := c.alloc(100, func(*entry) bool { return true })
		if !ok {
			t.Fatalf("alloc for %v failed", k)
		}
		e := &entry{key: k, buf: buf, state: stReady}
		c.entries[k] = e
		c.policy().Insert(k)
		return e
	}
	a, b := add(Key{0, 0}), add(Key{0, 1})
	add(Key{0, 2})
	c.policy().Access(a.key) // b is now the least recently used
	add(Key{0, 3})
	if _, ok := c.entries[b.key]; ok || c.entries[a.key] == nil {
		t.Fatalf("LRU victim: entries %v, want %v evicted and %v kept", len(c.entries), b.key, a.key)
	}
	if got := c.residentBytes(); got != 300 {
		t.Fatalf("resident bytes %d, want 300", got)
	}
	if _, ok := c.alloc(100, func(*entry) bool { return false }); ok {
		t.Fatal("alloc succeeded with nothing evictable and no room")
	}
	a.pins, a.state = 1, stFailed
	c.drop(a)
	if _, ok := c.entries[a.key]; ok || a.buf == nil {
		t.Fatal("drop: a failed pinned entry must leave the cache and keep its buffer")
	}
	c.unpin(a)
	if a.buf != nil || c.budget.used != 200 {
		t.Fatalf("unpin of a failed entry: buffer %v, budget used %d, want released and 200", a.buf != nil, c.budget.used)
	}
}
