package expert

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
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
type faultReader struct {
	mu    *sync.Mutex // the store's: guards pages
	pages *pageCache
	src   pager // the file, or the emulated flash
	// onRun accounts one synchronous read (without mu): got bytes for
	// expert x of layer in d (the store's statistics, device clock and
	// sink).
	onRun  func(layer, x int, got int64, d time.Duration)
	layout Layout
	path   string

	page     int64   // bytes
	scratch  []byte  // one expert, assembled
	win      []byte  // the read window
	pageBuf  []byte  // the page being touched, when a read may evict it
	iov      []iovec // preadPages's vectors, reused
	fileSize int64
	raPages  int64   // read-ahead window, in pages
	ra       naiveRA // the file's read-ahead state (naive_readahead.go)
}

// newFaultReader returns the naive mode's reader of the file at path
// (fileSize bytes, whose largest expert has maxExpert bytes) through src,
// with its page cache, read window and assembly buffer sized to fit
// budget together.
func newFaultReader(p *Profile, path string, budget, maxExpert, fileSize int64, src pager) (*faultReader, error) {
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
	return &faultReader{pages: newPageCache(page, limit), src: src, path: path, page: page, scratch: alignedBuf(scratch), win: alignedBuf(win),
		pageBuf: make([]byte, page), fileSize: fileSize, raPages: win / page}, nil
}

// useNaive is Use in the naive mode: each expert in the router's order,
// faulted in by the store's faultReader, then computed.
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
		f, err := s.rd.expert(ctx, Key{int32(layer), int32(x)}, nil, nil)
		if err != nil {
			return err
		}
		s.mu.Lock()
		if f.faults == 0 {
			s.meter.stats.Hits++
			ls.Hits++
		} else {
			s.meter.stats.Misses++
			ls.Misses++
			ls.Missed = append(ls.Missed, x)
		}
		s.mu.Unlock()
		if err := fn(i, f.w); err != nil {
			return err
		}
	}
	return nil
}

// pagesRead is the faultReader's onRun: it accounts a synchronous read
// of got bytes for expert x of layer that took d (on the device clock's
// flash under device time) and reports it to the sink.
func (s *Store) pagesRead(layer, x int, got int64, d time.Duration) {
	s.mu.Lock()
	if s.clock != nil {
		s.clock.syncRead(got, (got+s.pages.page-1)/s.pages.page)
	}
	s.meter.stats.Reads++
	s.meter.stats.BytesRead += got
	s.meter.step.bytes += got
	s.meter.stats.Stall += d
	s.meter.step.stall += d
	s.meter.layers[layer].Stall += d
	s.mu.Unlock()
	if s.opts.Sink != nil {
		s.opts.Sink.Read(&trace.ReadEvent{Layer: layer, Expert: x, Bytes: got, Latency: d})
	}
}

// expert implements reader: it assembles expert k from pages, faulting in
// the missing ones as a mapping's accesses would (naive_readahead.go), into
// its own buffer (valid until the next call; buf and spec are unused). Its
// faults are the synchronous reads of a page that was not cached.
func (r *faultReader) expert(ctx context.Context, k Key, _ []byte, _ *atomic.Bool) (fetched, error) {
	layer, x := int(k.Layer), int(k.Expert)
	parts := r.layout.Experts[layer][x]
	var w [3][]byte
	var off int64
	faults := 0
	for pi, ext := range parts {
		dst := r.scratch[off : off+ext.Len]
		for pos := ext.Off; pos < ext.Off+ext.Len; {
			idx := pos / r.page
			pageOff := pos - idx*r.page
			take := min(r.page-pageOff, ext.Off+ext.Len-pos)
			data, fault, err := r.touch(ctx, layer, x, idx)
			if err != nil {
				return fetched{}, err
			}
			if fault {
				faults++
			}
			if int64(len(data)) < pageOff+take {
				return fetched{}, fmt.Errorf("expert: reading %v from %s (page at %d): %w (file truncated or changed under the runtime?)", k, r.path, idx*r.page, io.ErrUnexpectedEOF)
			}
			// The copy is host time only: a mapped page needs none.
			copy(dst[pos-ext.Off:], data[pageOff:pageOff+take])
			pos += take
		}
		w[pi] = dst[:ext.Len:ext.Len]
		off = roundUp(off+ext.Len, r.page)
	}
	return fetched{w: moe.Weights{Gate: w[0], Up: w[1], Down: w[2]}, faults: faults}, nil
}

// readRun reads count pages from page idx in one synchronous read
// (through the emulated device under a profile), accounts it (onRun) and
// caches the pages; when want lies in the run, it returns its data (in
// pageBuf, valid until the next read). Where it can, it reads straight
// into the cache's page buffers (one preadv), as the kernel reads into its
// page cache, so the copy of every page read is not charged to the host's
// compute; otherwise into the read window, copying each page.
func (r *faultReader) readRun(ctx context.Context, layer, x int, idx, count, want int64) ([]byte, error) {
	n := r.pages
	start := time.Now()
	r.mu.Lock()
	bufs := n.reserve(count, r.src.isDirect())
	r.mu.Unlock()
	got, err := r.src.pages(ctx, bufs, r.win[:count*r.page], idx*r.page, &r.iov)
	if err != nil {
		r.mu.Lock()
		n.unreserve(bufs)
		r.mu.Unlock()
		return nil, err
	}
	d := time.Since(start)
	var out []byte
	r.mu.Lock()
	for i := int64(0); i < count; i++ {
		lo, hi := min(i*r.page, int64(got)), min((i+1)*r.page, int64(got))
		if idx+i == want {
			src := r.win[lo:hi]
			if bufs != nil {
				src = bufs[i][:hi-lo]
			}
			out = r.pageBuf[:copy(r.pageBuf, src)]
		}
		switch {
		case bufs == nil && lo < hi:
			n.insert(idx+i, r.win[lo:hi])
		case bufs != nil && lo < hi:
			clear(bufs[i][hi-lo:])
			n.insertBuf(idx+i, bufs[i])
		case bufs != nil:
			n.unreserve(bufs[i : i+1])
		}
	}
	n.peak = max(n.peak, n.used+int64(len(r.scratch))+int64(len(r.win)))
	r.mu.Unlock()
	r.onRun(layer, x, int64(got), d)
	return out, nil
}

// naiveStrategy is the naive mode's strategy: it serves a Use by page
// faults (useNaive, through the store's faultReader) instead of the demand
// loop, so of the rest only its flags matter (no predictions, serial).
type naiveStrategy struct{ onDemandStrategy }

func (naiveStrategy) serve(ctx context.Context, s *Store, layer int, experts []int, fn func(int, moe.Weights) error) error {
	return s.useNaive(ctx, layer, experts, fn)
}
