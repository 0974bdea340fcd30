package expert

import (
	"slices"
	"testing"
)

// budgetOp is one step of a budget test: alloc size bytes for key (the key
// becomes resident in the policy when the alloc succeeds), or, with
// release, give key's buffer back (and remove it from the policy).
type budgetOp struct {
	key     int32
	size    int64
	release bool
	// pinned keys may not be evicted by this alloc.
	pinned []int32
	// want
	ok      bool
	evicted []int32
	used    int64
	free    int64
}

func TestBudget(t *testing.T) {
	t.Parallel()
	k := func(e int32) Key { return Key{0, e} }
	for _, tc := range []struct {
		name   string
		limit  int64
		policy string
		ops    []budgetOp
		peak   int64
	}{
		{
			name: "fits without eviction", limit: 10, policy: "lru",
			ops: []budgetOp{
				{key: 1, size: 4, ok: true, used: 4},
				{key: 2, size: 4, ok: true, used: 8},
			},
			peak: 8,
		},
		{
			name: "evicts the policy's victim", limit: 12, policy: "lru",
			ops: []budgetOp{
				{key: 1, size: 4, ok: true, used: 4},
				{key: 2, size: 4, ok: true, used: 8},
				{key: 3, size: 4, ok: true, used: 12},
				{key: 4, size: 4, ok: true, evicted: []int32{1}, used: 12},
				{key: 5, size: 8, ok: true, evicted: []int32{2, 3}, used: 12},
			},
			peak: 12,
		},
		{
			name: "respects what may not be evicted", limit: 8, policy: "lru",
			ops: []budgetOp{
				{key: 1, size: 4, ok: true, used: 4},
				{key: 2, size: 4, ok: true, used: 8},
				{key: 3, size: 4, pinned: []int32{1}, ok: true, evicted: []int32{2}, used: 8},
				{key: 4, size: 4, pinned: []int32{1, 3}, ok: false, used: 8},
			},
			peak: 8,
		},
		{
			name: "reuses a released buffer of the same size", limit: 8, policy: "lfu",
			ops: []budgetOp{
				{key: 1, size: 4, ok: true, used: 4},
				{key: 1, release: true, used: 0, free: 4},
				{key: 2, size: 4, ok: true, used: 4, free: 0},
			},
			peak: 4,
		},
		{
			name: "drops reusable buffers of another size", limit: 8, policy: "lfu",
			ops: []budgetOp{
				{key: 1, size: 4, ok: true, used: 4},
				{key: 2, size: 4, ok: true, used: 8},
				{key: 1, release: true, used: 4, free: 4},
				{key: 2, release: true, used: 0, free: 8},
				{key: 3, size: 6, ok: true, used: 6, free: 0},
				{key: 4, size: 2, ok: true, used: 8, free: 0},
			},
			peak: 8,
		},
		{
			name: "keeps reusable buffers that still fit", limit: 12, policy: "lfu",
			ops: []budgetOp{
				{key: 1, size: 4, ok: true, used: 4},
				{key: 1, release: true, used: 0, free: 4},
				{key: 2, size: 6, ok: true, used: 6, free: 4},
			},
			peak: 10,
		},
		{
			name: "nothing to evict", limit: 4, policy: "lfu",
			ops: []budgetOp{
				{key: 1, size: 4, pinned: nil, ok: true, used: 4},
				{key: 2, size: 4, pinned: []int32{1}, ok: false, used: 4},
			},
			peak: 4,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, err := NewPolicy(tc.policy)
			if err != nil {
				t.Fatal(err)
			}
			b := newBudget(tc.limit, p)
			bufs := map[Key][]byte{}
			for i, op := range tc.ops {
				if op.release {
					b.policy.Remove(k(op.key))
					b.release(bufs[k(op.key)])
					delete(bufs, k(op.key))
				} else {
					var evicted []int32
					buf, ok := b.alloc(op.size, func(x Key) bool {
						return !slices.Contains(op.pinned, x.Expert)
					}, func(x Key) {
						evicted = append(evicted, x.Expert)
						b.policy.Remove(x)
						b.release(bufs[x])
						delete(bufs, x)
					})
					if ok != op.ok {
						t.Fatalf("op %d: alloc ok = %v, want %v", i, ok, op.ok)
					}
					if !slices.Equal(evicted, op.evicted) {
						t.Fatalf("op %d: evicted %v, want %v", i, evicted, op.evicted)
					}
					if ok {
						if int64(len(buf)) != op.size {
							t.Fatalf("op %d: buffer of %d bytes, want %d", i, len(buf), op.size)
						}
						bufs[k(op.key)] = buf
						b.policy.Insert(k(op.key))
						b.policy.Access(k(op.key))
					}
				}
				if b.used != op.used || b.freeBytes != op.free {
					t.Fatalf("op %d: used %d free %d, want %d and %d", i, b.used, b.freeBytes, op.used, op.free)
				}
				if b.held() > tc.limit {
					t.Fatalf("op %d: holds %d bytes, over the %d-byte limit", i, b.held(), tc.limit)
				}
			}
			if b.peak != tc.peak {
				t.Fatalf("peak %d, want %d", b.peak, tc.peak)
			}
		})
	}
}

// TestBudgetReusesBuffers: a buffer given back is handed out again, not
// reallocated.
func TestBudgetReusesBuffers(t *testing.T) {
	t.Parallel()
	b := newBudget(8192, newLRU())
	buf, ok := b.alloc(4096, func(Key) bool { return false }, func(Key) {})
	if !ok {
		t.Fatal("alloc failed")
	}
	b.release(buf)
	again, ok := b.alloc(4096, func(Key) bool { return false }, func(Key) {})
	if !ok || &again[0] != &buf[0] {
		t.Fatal("the released buffer was not reused")
	}
}

func BenchmarkBudgetAllocEvict(b *testing.B) {
	bud := newBudget(64*4096, newLFU())
	bufs := map[Key][]byte{}
	evict := func(x Key) {
		bud.policy.Remove(x)
		bud.release(bufs[x])
		delete(bufs, x)
	}
	b.ReportAllocs()
	i := int32(0)
	for b.Loop() {
		k := Key{0, i % 256}
		i++
		if _, ok := bufs[k]; ok {
			bud.policy.Access(k)
			continue
		}
		buf, _ := bud.alloc(4096, func(Key) bool { return true }, evict)
		bufs[k] = buf
		bud.policy.Insert(k)
		bud.policy.Access(k)
	}
}
