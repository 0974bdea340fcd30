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
// touches its gate, up and down data in order; every page not cached is a
// fault: one synchronous read, on the computing goroutine, of that page and
// the uncached pages after it up to the profile's ReadAhead (at least one
// page), which may run past the expert into its neighbours as the kernel's
// read-around does. Faults are one at a time in computation order, experts
// in the router's order. Cached pages are evicted least recently used so
// pages plus the one-expert assembly buffer and the read window stay within
// the budget. It is deterministic: what is read depends only on the
// demands, the budget and the profile.
//
// How it differs from a real mmap: pages are copied into a contiguous
// buffer before compute instead of being mapped (the copy's host time is
// not counted as device time); the cache is strict LRU over this store's
// budget, not the kernel's two-list LRU over all of RAM shared with other
// files; read-ahead is a fixed forward window from the faulting page, not
// the kernel's adaptive window (Linux reads around a fault, half behind)
// with asynchronous readahead marks; and there is no fault-around mapping
// of cached neighbours or page-table cost.
type naiveState struct {
	page, ahead int64 // bytes
	limit       int64 // bytes of pages the cache may hold
	used        int64
	pages       map[int64]*naivePage
	head        naivePage // LRU list sentinel: head.next is the most recent
	free        [][]byte
	scratch     []byte // one expert, assembled
	win         []byte // the read window
	fileSize    int64
}

type naivePage struct {
	idx        int64
	data       []byte
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
	n := &naiveState{page: page, ahead: ahead, limit: limit, pages: map[int64]*naivePage{}, scratch: alignedBuf(scratch), win: alignedBuf(win), fileSize: fileSize}
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
	for n.used+n.page > n.limit {
		v := n.head.prev
		n.unlink(v)
		delete(n.pages, v.idx)
		n.free = append(n.free, v.data)
		n.used -= n.page
	}
	var buf []byte
	if k := len(n.free); k > 0 {
		buf, n.free = n.free[k-1], n.free[:k-1]
	} else {
		buf = make([]byte, n.page)
	}
	copy(buf, data)
	clear(buf[len(data):])
	p := &naivePage{idx: idx, data: buf}
	n.pages[idx] = p
	n.pushFront(p)
	n.used += n.page
}

// useNaive is Use in the naive mode.
func (s *Store) useNaive(ctx context.Context, layer int, experts []int, fn func(int, moe.Weights) error) error {
	s.mu.Lock()
	ls := &s.layerStats[layer]
	ls.Hits, ls.Misses, ls.PrefetchUsed, ls.PrefetchWasted, ls.Stall = 0, 0, 0, 0, 0
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
	if s.rec != nil {
		s.rec.Calls = append(s.rec.Calls, TraceCall{Layer: layer, Experts: append([]int(nil), experts...)})
	}
	s.stats.Uses++
	s.stats.Demanded += int64(len(experts))
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
			s.stats.Hits++
			ls.Hits++
		} else {
			s.stats.Misses++
			ls.Misses++
		}
		s.mu.Unlock()
		if err := fn(i, w); err != nil {
			return err
		}
	}
	return nil
}

// naiveExpert assembles expert x of layer from pages, faulting in the
// missing ones, and returns its weights and the number of faults.
func (s *Store) naiveExpert(ctx context.Context, layer, x int) (moe.Weights, int, error) {
	n := s.naive
	parts := s.layout.Experts[layer][x]
	var w [3][]byte
	var off int64
	faults := 0
	var copyTime time.Duration // host-only: a mapped page needs no copy
	for pi, ext := range parts {
		dst := n.scratch[off : off+ext.Len]
		for pos := ext.Off; pos < ext.Off+ext.Len; {
			idx := pos / n.page
			pageOff := pos - idx*n.page
			take := min(n.page-pageOff, ext.Off+ext.Len-pos)
			s.mu.Lock()
			p := n.pages[idx]
			if p != nil {
				n.unlink(p)
				n.pushFront(p)
			}
			s.mu.Unlock()
			if p == nil {
				data, err := s.fault(ctx, layer, x, idx)
				if err != nil {
					return moe.Weights{}, 0, err
				}
				faults++
				if int64(len(data)) < pageOff+take {
					return moe.Weights{}, 0, fmt.Errorf("expert: reading %v from %s (page at %d): %w (file truncated or changed under the runtime?)", Key{int32(layer), int32(x)}, s.path, idx*n.page, io.ErrUnexpectedEOF)
				}
				t0 := time.Now()
				copy(dst[pos-ext.Off:], data[pageOff:pageOff+take])
				copyTime += time.Since(t0)
			} else {
				t0 := time.Now()
				copy(dst[pos-ext.Off:], p.data[pageOff:pageOff+take])
				copyTime += time.Since(t0)
			}
			pos += take
		}
		w[pi] = dst[:ext.Len:ext.Len]
		off = roundUp(off+ext.Len, n.page)
	}
	_ = copyTime
	return moe.Weights{Gate: w[0], Up: w[1], Down: w[2]}, faults, nil
}

// fault reads page idx and the uncached pages after it, up to the
// read-ahead, synchronously (through the emulated device under a profile),
// caches them and returns the data of page idx (valid until the next
// fault).
func (s *Store) fault(ctx context.Context, layer, x int, idx int64) ([]byte, error) {
	n := s.naive
	maxPages := int64(len(n.win)) / n.page
	s.mu.Lock()
	cnt := int64(1)
	for cnt < maxPages && (idx+cnt)*n.page < n.fileSize && n.pages[idx+cnt] == nil {
		cnt++
	}
	s.mu.Unlock()
	start := time.Now()
	buf := n.win[:cnt*n.page]
	got, err := s.f.ReadAt(buf, idx*n.page)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("expert: reading %s at %d: %w", s.path, idx*n.page, err)
	}
	if got == 0 {
		return nil, fmt.Errorf("expert: reading %s at %d: %w (file truncated?)", s.path, idx*n.page, io.ErrUnexpectedEOF)
	}
	if s.throttle != nil {
		if err := s.throttle.Wait(ctx, start, int64(got), nil); err != nil {
			return nil, err
		}
	}
	d := time.Since(start)
	s.mu.Lock()
	if s.clock != nil {
		s.clock.syncRead(int64(got))
	}
	for i := int64(0); i*n.page < int64(got); i++ {
		s.naive.insert(idx+i, buf[i*n.page:min((i+1)*n.page, int64(got))])
	}
	s.budget.peak = max(s.budget.peak, n.used+int64(len(n.scratch))+int64(len(n.win)))
	s.stats.Reads++
	s.stats.BytesRead += int64(got)
	s.step.bytes += int64(got)
	s.stats.Stall += d
	s.step.stall += d
	s.layerStats[layer].Stall += d
	s.mu.Unlock()
	if s.opts.Sink != nil {
		s.opts.Sink.Read(&trace.ReadEvent{Layer: layer, Expert: x, Bytes: int64(got), Latency: d})
	}
	return buf[:min(n.page, int64(got))], nil
}

// naiveStrategy is the strategy entry of the naive mode; Use does not go
// through the demand loop (useNaive), so only its flags matter.
type naiveStrategy struct{ onDemandStrategy }
