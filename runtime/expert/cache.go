package expert

import "github.com/lesfarm/lesfarm/runtime/moe"

// cache is the expert cache of the cache modes (every mode but the naive
// one, whose cache is pages: pageCache): the entries — experts resident,
// queued or being read — the byte budget they live in with its cache
// policy (budget.go; the policies in policy*.go and the oracle's Belady),
// and the demand bookkeeping that says what may be evicted (pins, the
// current Use). It decides nothing about reads: what to read is the
// mode's strategy's (strategy.go), how the reader's (reader.go), when the
// read queue's (readqueue.go).
//
// Under device time an entry counts as ready once its read is done on the
// device clock (clock non-nil), so eviction and compute order follow the
// emulated device, not the host's preads.
//
// It has no goroutines and no lock of its own: the store calls it with its
// lock held. The zero value is not usable; use newCache.
type cache struct {
	entries map[Key]*entry
	budget  *budget
	clock   *DeviceClock // nil: an entry is ready when read
	// useSeq numbers the store's Uses; an entry demanded by the current
	// Use (demandSeq) and not computed in it yet (doneSeq) stays.
	useSeq uint64
}

func newCache(limit int64, p Policy) *cache {
	return &cache{entries: map[Key]*entry{}, budget: newBudget(limit, p)}
}

// policy returns the cache policy that picks victims.
func (c *cache) policy() Policy { return c.budget.policy }

// ready reports whether e may be computed as far as the mode's decisions
// go: read, or under device time done on the device clock (the real pread
// may still run; the store waits for it without device time passing).
func (c *cache) ready(e *entry) bool {
	if c.clock == nil {
		return e.state == stReady
	}
	return e.state != stFailed && e.issued && e.devDone <= c.clock.now
}

// evictable says whether e may be evicted at all: resident, not pinned, and
// not demanded by the current Use without having been computed yet.
func (c *cache) evictable(e *entry) bool {
	if e.state != stReady || e.pins > 0 || (c.clock != nil && !c.ready(e)) {
		return false
	}
	return !(e.demandSeq == c.useSeq && e.doneSeq != c.useSeq)
}

// specEvictable says whether a speculative read for layer target may evict
// e: only resident, unused experts outside the layer being computed and the
// target layer, and never another prefetch that has not been used yet.
func (c *cache) specEvictable(e *entry, target int) bool {
	if !c.evictable(e) || e.spec.Load() {
		return false
	}
	l := int(e.key.Layer)
	return l != target && l != target-1
}

// alloc returns a buffer of size bytes, evicting what ok allows until the
// budget has room; false when it cannot. The budget counts entries and
// reusable buffers, so memory held never exceeds it.
func (c *cache) alloc(size int64, ok func(*entry) bool) ([]byte, bool) {
	return c.budget.alloc(size, func(k Key) bool {
		e := c.entries[k]
		return e != nil && ok(e)
	}, func(k Key) { c.evict(c.entries[k]) })
}

// evict removes a resident, unpinned entry and recycles its buffer.
func (c *cache) evict(e *entry) {
	delete(c.entries, e.key)
	c.budget.policy.Remove(e.key)
	c.release(e)
}

// drop takes a failed read's entry out of the cache (if it is still the
// key's entry) and out of the policy; its buffer goes back once unpinned.
func (c *cache) drop(e *entry) {
	if c.entries[e.key] == e {
		delete(c.entries, e.key)
		c.budget.policy.Remove(e.key)
	}
	if e.pins == 0 {
		c.release(e)
	}
}

// release gives e's buffer back to the budget for reuse.
func (c *cache) release(e *entry) {
	if e.buf == nil {
		return
	}
	c.budget.release(e.buf)
	e.buf = nil
	e.w = moe.Weights{}
}

// unpin drops one pin of e, releasing a failed entry's buffer with the
// last.
func (c *cache) unpin(e *entry) {
	e.pins--
	if e.pins == 0 && e.state == stFailed {
		c.release(e)
	}
}

// residentBytes returns the bytes of experts read and held now
// (Stats.CacheBytes).
func (c *cache) residentBytes() int64 {
	var n int64
	for _, e := range c.entries {
		if e.state == stReady {
			n += int64(len(e.buf))
		}
	}
	return n
}

// reading reports whether an entry is queued or being read.
func (c *cache) reading() bool {
	for _, e := range c.entries {
		if e.state == stReading || e.state == stQueued {
			return true
		}
	}
	return false
}
