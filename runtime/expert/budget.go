package expert

// budget is the store's byte accounting: the bytes held by experts
// (resident, queued or being read) plus reusable buffers never exceed
// limit. It owns the cache policy that picks what to evict and recycles
// freed buffers by size. It has no goroutines and no lock of its own: the
// store calls it with its lock held. The zero value is not usable; use
// newBudget.
type budget struct {
	limit     int64
	used      int64 // bytes in entries (resident, queued or reading)
	free      map[int64][][]byte
	freeBytes int64
	peak      int64 // most bytes held (entries + reusable buffers)
	policy    Policy
}

func newBudget(limit int64, p Policy) *budget {
	return &budget{limit: limit, free: map[int64][][]byte{}, policy: p}
}

// alloc returns a buffer of size bytes. While the budget has no room it
// asks the policy for a victim among the keys evictable accepts and calls
// evict with it; evict must give the victim's buffer back (remove) before
// returning. It returns false when nothing more can be evicted.
func (b *budget) alloc(size int64, evictable func(Key) bool, evict func(Key)) ([]byte, bool) {
	for b.used+size > b.limit {
		v, found := b.policy.Victim(evictable)
		if !found {
			return nil, false
		}
		evict(v)
	}
	if l := b.free[size]; len(l) > 0 {
		buf := l[len(l)-1]
		b.free[size] = l[:len(l)-1]
		b.freeBytes -= size
		b.used += size
		return buf, true
	}
	// Drop reusable buffers of other sizes to make room.
	for sz, l := range b.free {
		for len(l) > 0 && b.used+b.freeBytes+size > b.limit {
			l = l[:len(l)-1]
			b.freeBytes -= sz
		}
		b.free[sz] = l
	}
	b.used += size
	b.peak = max(b.peak, b.used+b.freeBytes)
	return alignedBuf(size), true
}

// release takes back a buffer alloc returned, keeping it for reuse.
func (b *budget) release(buf []byte) {
	n := int64(len(buf))
	b.used -= n
	b.free[n] = append(b.free[n], buf)
	b.freeBytes += n
}

// held returns the bytes held: entries plus reusable buffers.
func (b *budget) held() int64 { return b.used + b.freeBytes }
