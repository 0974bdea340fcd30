package expert

// pageCache is the naive mode's cache: pages of the model file, as the
// kernel's page cache holds a mapped file's, evicted least recently used
// so the pages stay within limit bytes. A page may carry the read-ahead
// mark (naive_readahead.go). Buffers and page structs are reused, so a
// decode allocates nothing once the cache is full: garbage would let the
// Go heap grow past the budget before the collector runs (a process capped
// at the budget, as a phone's memory is, was killed for it).
//
// It has no lock of its own: its owner (faultReader, MeasurePageCost)
// serialises access, the store with its lock. The zero value is not
// usable; use newPageCache.
type pageCache struct {
	page      int64 // bytes per page
	limit     int64 // bytes of pages the cache may hold
	used      int64
	peak      int64 // most bytes held with the reader's buffers (faultReader)
	pages     map[int64]*naivePage
	head      naivePage    // LRU list sentinel: head.next is the most recent
	freeBufs  [][]byte     // evicted pages' buffers, reused (takeBuf)
	freePages []*naivePage // and their structs
	rbufs     [][]byte     // reserve's result, reused
}

type naivePage struct {
	idx        int64
	data       []byte
	mark       bool // PG_readahead: touching it reads the next window
	prev, next *naivePage
}

func newPageCache(page, limit int64) *pageCache {
	n := &pageCache{page: page, limit: limit, pages: map[int64]*naivePage{}}
	n.head.next, n.head.prev = &n.head, &n.head
	return n
}

func (n *pageCache) unlink(p *naivePage) { p.prev.next, p.next.prev = p.next, p.prev }

func (n *pageCache) pushFront(p *naivePage) {
	p.prev, p.next = &n.head, n.head.next
	n.head.next.prev = p
	n.head.next = p
}

// touch returns page idx if cached, making it the most recent, and
// clears its read-ahead mark, reporting whether it had one.
func (n *pageCache) touch(idx int64) (p *naivePage, marked bool) {
	p = n.pages[idx]
	if p != nil {
		n.unlink(p)
		n.pushFront(p)
		marked, p.mark = p.mark, false
	}
	return p, marked
}

// insert caches page idx with data (copied), evicting LRU pages; it does
// nothing when the cache cannot hold one page.
func (n *pageCache) insert(idx int64, data []byte) {
	if n.limit < n.page {
		return
	}
	n.evictFor(n.page)
	buf := n.takeBuf()
	copy(buf, data)
	clear(buf[len(data):])
	n.insertBuf(idx, buf)
}

// evictFor evicts LRU pages until bytes more fit within the limit.
func (n *pageCache) evictFor(bytes int64) {
	for n.used+bytes > n.limit && n.head.prev != &n.head {
		v := n.head.prev
		n.unlink(v)
		delete(n.pages, v.idx)
		n.freeBufs = append(n.freeBufs, v.data)
		*v = naivePage{}
		n.freePages = append(n.freePages, v)
		n.used -= n.page
	}
}

// takeBuf returns a free page buffer.
func (n *pageCache) takeBuf() []byte {
	if k := len(n.freeBufs); k > 0 {
		b := n.freeBufs[k-1]
		n.freeBufs = n.freeBufs[:k-1]
		return b
	}
	return make([]byte, n.page)
}

// insertBuf caches page idx with buf (one page, taken over; room for it
// was made by insert or reserve).
func (n *pageCache) insertBuf(idx int64, buf []byte) {
	var p *naivePage
	if k := len(n.freePages); k > 0 {
		p, n.freePages = n.freePages[k-1], n.freePages[:k-1]
	} else {
		p = &naivePage{}
	}
	p.idx, p.data = idx, buf
	n.pages[idx] = p
	n.pushFront(p)
	n.used += n.page
}

// reserve evicts LRU pages to make room for count pages and returns a
// page buffer for each, to read into; nil when the cache cannot hold them
// or, for direct reads, a buffer is not aligned (then the caller reads
// into its window). Buffers not inserted go back with unreserve.
func (n *pageCache) reserve(count int64, direct bool) [][]byte {
	if !canReadv || count*n.page > n.limit {
		return nil
	}
	n.evictFor(count * n.page)
	bufs := n.rbufs[:0]
	defer func() { n.rbufs = bufs[:0] }()
	for range count {
		buf := n.takeBuf()
		if direct && !isAligned(buf) {
			n.unreserve(append(bufs, buf))
			return nil
		}
		bufs = append(bufs, buf)
	}
	return bufs
}

// unreserve returns reserved buffers unused.
func (n *pageCache) unreserve(bufs [][]byte) {
	n.freeBufs = append(n.freeBufs, bufs...)
}
