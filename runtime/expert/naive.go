package expert

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/lesfarm/lesfarm/runtime/moe"
	"github.com/lesfarm/lesfarm/runtime/trace"
)

// The naive mode: on-demand loading as mmap does it, the baseline users
// have today (llama.cpp maps the model and lets the kernel fault experts
// in) and the first row of the published ladder.
//
// Experts are read from the file as it is (an unpacked GGUF keeps each
// expert's gate, up and down in three stacked tensors) in pages of the
// profile's PageSize (4 KiB on Android, 16 KiB on iOS). Computing an expert
// touches its gate, up and down data in order, page by page, and each
// touch does what an access to a mapping does in Linux: a page not cached
// is a fault, one synchronous read of the window of the profile's
// ReadAhead around it (half before it, its missing pages only, so it runs
// into neighbouring experts), and touching a page marked by an earlier
// window reads the next window ahead (naive_readahead.go). Reads are one
// at a time in computation order, experts in the router's order. Cached
// pages are evicted least recently used so pages plus the one-expert
// assembly buffer and the read window stay within the budget. It is
// deterministic: what is read depends only on the demands, the budget and
// the profile.
//
// How it differs from a real mmap: pages are copied into a contiguous
// buffer before compute instead of being mapped (the copy's host time is
// counted as compute, not as a read); the cache is strict LRU over this
// store's budget, not the kernel's active and inactive lists over the
// memory cgroup, which also hold the process's other file pages; the
// window read ahead of a marked page is read synchronously; experts are
// computed in the router's order, where llama.cpp computes each layer's
// gates, then ups, then downs, each in expert order; and there is no
// fault-around mapping of cached neighbours or page-table cost.
type naiveState struct {
	page, ahead int64 // bytes
	limit       int64 // bytes of pages the cache may hold
	used        int64
	pages       map[int64]*naivePage
	head        naivePage    // LRU list sentinel: head.next is the most recent
	freeBufs    [][]byte     // evicted pages' buffers, reused (takeBuf)
	freePages   []*naivePage // and their structs
	rbufs       [][]byte     // reserve's result, reused
	iov         []iovec      // preadPages's vectors, reused
	scratch     []byte       // one expert, assembled
	win         []byte       // the read window
	pageBuf     []byte       // the page being touched, when a read may evict it
	fileSize    int64
	raPages     int64   // read-ahead window, in pages
	ra          naiveRA // the file's read-ahead state (naive_readahead.go)
}

type naivePage struct {
	idx        int64
	data       []byte
	mark       bool // PG_readahead: touching it reads the next window
	prev, next *naivePage
}

func newNaive(p *Profile, path string, budget, maxExpert, fileSize int64) (*naiveState, error) {
	// Without a profile (direct storage): 4 KiB pages and the read-ahead
	// the kernel uses for the file's block device, as a mapping of it
	// would get (what profile measure records for the device), else
	// Linux's default read_ahead_kb of 128.
	page, ahead := int64(DefaultPageSize), int64(DirectReadAhead)
	if p == nil {
		if ra, ok := DeviceReadAhead(path); ok {
			ahead = ra
		}
	}
	if p != nil {
		if p.PageSize > 0 {
			page = p.PageSize
		}
		ahead = p.ReadAhead
	}
	win := max(page, roundUp(ahead, page))
	// The assembly buffer holds whole pages of each part.
	scratch := roundUp(maxExpert, page) + 3*page
	// A read-ahead larger than half of what the budget leaves shrinks to
	// it, so the window never leaves the page cache nothing to keep (the
	// kernel's window cannot exceed the memory it may use either; with the
	// whole budget as window every page of every expert was a fault).
	if room := (budget - scratch) / 2 / page * page; win > room {
		win = max(room, page)
	}
	limit := budget - scratch - win
	if limit < 0 {
		return nil, fmt.Errorf("%w: the naive mode needs %d bytes for one expert's pages and a %d-byte read window, budget %d", ErrBudgetTooSmall, scratch, win, budget)
	}
	n := &naiveState{page: page, ahead: ahead, limit: limit, pages: map[int64]*naivePage{}, scratch: alignedBuf(scratch), win: alignedBuf(win),
		pageBuf: make([]byte, page), fileSize: fileSize, raPages: win / page}
	n.head.next, n.head.prev = &n.head, &n.head
	return n, nil
}

func (n *naiveState) unlink(p *naivePage) { p.prev.next, p.next.prev = p.next, p.prev }

func (n *naiveState) pushFront(p *naivePage) {
	p.prev, p.next = &n.head, n.head.next
	n.head.next.prev = p
	n.head.next = p
}

// insert caches page idx with data (copied), evicting LRU pages; it does
// nothing when the cache cannot hold one page.
func (n *naiveState) insert(idx int64, data []byte) {
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
func (n *naiveState) evictFor(bytes int64) {
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

// takeBuf returns a free page buffer. Buffers and page structs are
// reused, so a decode allocates nothing once the cache is full: garbage
// would let the Go heap grow past the budget before the collector runs (a
// process capped at the budget, as a phone's memory is, was killed for
// it).
func (n *naiveState) takeBuf() []byte {
	if k := len(n.freeBufs); k > 0 {
		b := n.freeBufs[k-1]
		n.freeBufs = n.freeBufs[:k-1]
		return b
	}
	return make([]byte, n.page)
}

// insertBuf caches page idx with buf (one page, taken over; room for it
// was made by insert or reserve).
func (n *naiveState) insertBuf(idx int64, buf []byte) {
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
// into the window). Buffers not inserted go back with unreserve.
func (n *naiveState) reserve(count int64, direct bool) [][]byte {
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
func (n *naiveState) unreserve(bufs [][]byte) {
	n.freeBufs = append(n.freeBufs, bufs...)
}

// useNaive is Use in the naive mode.
func (s *Store) useNaive(ctx context.Context, layer int, experts []int, fn func(int, moe.Weights) error) error {
	s.mu.Lock()
	ls := &s.meter.layers[layer]
	ls.Hits, ls.Misses, ls.PrefetchUsed, ls.PrefetchWasted, ls.Stall = 0, 0, 0, 0, 0
	ls.Missed = ls.Missed[:0]
	for i, x := range experts {
		if x < 0 || x >= s.shapes[layer].Experts {
			s.mu.Unlock()
			return fmt.Errorf("expert: layer %d has no expert %d", layer, x)
		}
		for _, y := range experts[:i] {
			if x == y {
				s.mu.Unlock()
				return fmt.Errorf("expert: layer %d expert %d demanded twice in one call", layer, x)
			}
		}
	}
	if s.meter.rec != nil {
		s.meter.rec.Calls = append(s.meter.rec.Calls, TraceCall{Layer: layer, Experts: append([]int(nil), experts...)})
	}
	s.meter.stats.Uses++
	s.meter.stats.Demanded += int64(len(experts))
	s.mu.Unlock()
	for i, x := range experts {
		if err := ctx.Err(); err != nil {
			return err
		}
		w, faults, err := s.naiveExpert(ctx, layer, x)
		if err != nil {
			return err
		}
		s.mu.Lock()
		if faults == 0 {
			s.meter.stats.Hits++
			ls.Hits++
		} else {
			s.meter.stats.Misses++
			ls.Misses++
			ls.Missed = append(ls.Missed, x)
		}
		s.mu.Unlock()
		if err := fn(i, w); err != nil {
			return err
		}
	}
	return nil
}

// naiveExpert assembles expert x of layer from pages, faulting in the
// missing ones as a mapping's accesses would (naive_readahead.go), and
// returns its weights and the number of faults (synchronous reads of a
// page that was not cached).
func (s *Store) naiveExpert(ctx context.Context, layer, x int) (moe.Weights, int, error) {
	n := s.naive
	parts := s.layout.Experts[layer][x]
	var w [3][]byte
	var off int64
	faults := 0
	for pi, ext := range parts {
		dst := n.scratch[off : off+ext.Len]
		for pos := ext.Off; pos < ext.Off+ext.Len; {
			idx := pos / n.page
			pageOff := pos - idx*n.page
			take := min(n.page-pageOff, ext.Off+ext.Len-pos)
			data, fault, err := s.touch(ctx, layer, x, idx)
			if err != nil {
				return moe.Weights{}, 0, err
			}
			if fault {
				faults++
			}
			if int64(len(data)) < pageOff+take {
				return moe.Weights{}, 0, fmt.Errorf("expert: reading %v from %s (page at %d): %w (file truncated or changed under the runtime?)", Key{int32(layer), int32(x)}, s.path, idx*n.page, io.ErrUnexpectedEOF)
			}
			// The copy is host time only: a mapped page needs none.
			copy(dst[pos-ext.Off:], data[pageOff:pageOff+take])
			pos += take
		}
		w[pi] = dst[:ext.Len:ext.Len]
		off = roundUp(off+ext.Len, n.page)
	}
	return moe.Weights{Gate: w[0], Up: w[1], Down: w[2]}, faults, nil
}

// readRun reads count pages from page idx in one synchronous read
// (through the emulated device under a profile), accounts it and caches
// the pages; when want lies in the run, it returns its data (in pageBuf,
// valid until the next read). Where it can, it reads straight into the
// cache's page buffers (one preadv), as the kernel reads into its page
// cache, so the copy of every page read is not charged to the host's
// compute; otherwise into the read window, copying each page.
func (s *Store) readRun(ctx context.Context, layer, x int, idx, count, want int64) ([]byte, error) {
	n := s.naive
	start := time.Now()
	s.mu.Lock()
	bufs := n.reserve(count, s.direct)
	s.mu.Unlock()
	var got int
	var err error
	t0, a0 := s.meter.io.begin()
	if bufs != nil {
		got, err = preadPages(s.f, bufs, idx*n.page, &n.iov)
	} else {
		got, err = s.f.ReadAt(n.win[:count*n.page], idx*n.page)
	}
	s.meter.io.end(t0, a0, count*n.page)
	switch {
	case err != nil && !errors.Is(err, io.EOF):
		err = fmt.Errorf("expert: reading %s at %d: %w", s.path, idx*n.page, err)
	case got == 0:
		err = fmt.Errorf("expert: reading %s at %d: %w (file truncated?)", s.path, idx*n.page, io.ErrUnexpectedEOF)
	default:
		err = nil
	}
	if err == nil && s.throttle != nil {
		err = s.throttle.Wait(ctx, start, int64(got), nil)
	}
	if err != nil {
		s.mu.Lock()
		n.unreserve(bufs)
		s.mu.Unlock()
		return nil, err
	}
	d := time.Since(start)
	var out []byte
	s.mu.Lock()
	if s.clock != nil {
		s.clock.syncRead(int64(got), (int64(got)+n.page-1)/n.page)
	}
	for i := int64(0); i < count; i++ {
		lo, hi := min(i*n.page, int64(got)), min((i+1)*n.page, int64(got))
		if idx+i == want {
			src := n.win[lo:hi]
			if bufs != nil {
				src = bufs[i][:hi-lo]
			}
			out = n.pageBuf[:copy(n.pageBuf, src)]
		}
		switch {
		case bufs == nil && lo < hi:
			n.insert(idx+i, n.win[lo:hi])
		case bufs != nil && lo < hi:
			clear(bufs[i][hi-lo:])
			n.insertBuf(idx+i, bufs[i])
		case bufs != nil:
			n.unreserve(bufs[i : i+1])
		}
	}
	s.budget.peak = max(s.budget.peak, n.used+int64(len(n.scratch))+int64(len(n.win)))
	s.meter.stats.Reads++
	s.meter.stats.BytesRead += int64(got)
	s.meter.step.bytes += int64(got)
	s.meter.stats.Stall += d
	s.meter.step.stall += d
	s.meter.layers[layer].Stall += d
	s.mu.Unlock()
	if s.opts.Sink != nil {
		s.opts.Sink.Read(&trace.ReadEvent{Layer: layer, Expert: x, Bytes: int64(got), Latency: d})
	}
	return out, nil
}

// naiveStrategy is the naive mode's strategy: it serves a Use by page
// faults (useNaive) instead of the demand loop, so of the rest only its
// flags matter (no predictions, serial).
type naiveStrategy struct{ onDemandStrategy }

func (naiveStrategy) serve(ctx context.Context, s *Store, layer int, experts []int, fn func(int, moe.Weights) error) error {
	return s.useNaive(ctx, layer, experts, fn)
}
