package expert

import "context"

// The naive mode's read-ahead, as Linux does it for a mapped file
// (mm/filemap.c: do_sync_mmap_readahead, do_async_mmap_readahead; and
// mm/readahead.c: page_cache_async_ra), with ra the read-ahead in pages:
//
//   - A fault (an access to a page not cached) reads around it: the
//     window [page - ra/2, page + ra/2), its missing pages only, in one
//     read per run of missing pages. The page at three quarters of the
//     window (ra/4 before its end) is marked.
//   - An access to a marked page clears the mark and reads the next
//     window: when it is the mark the file's read-ahead state expects, the
//     ra pages after the current window; otherwise from the first missing
//     page within ra after it. The new window's first page is marked, so
//     a sequential walk through a mapping keeps reading ra pages ahead.
//
// The kernel reads a marked window asynchronously while the process goes
// on computing; here the read is synchronous (on this VM the compute of
// the pages left before the new window takes well under one read's
// latency). The file's read-ahead state is one per store, as the kernel
// keeps one per open file. What Linux does and this does not: it stops
// reading around when faults outnumber mapped hits a hundredfold
// (mmap_miss, MMAP_LOTSAMISS), never here because walking an expert hits
// far more pages than it faults; folios larger than a page; and reads of
// one window submitted together rather than one run after the other.

// naiveRA is the file's read-ahead state, in pages (file_ra_state).
type naiveRA struct {
	start, size, async int64
}

// touch returns the data of page idx of the model file, reading it (and
// its read-ahead) when not cached, and reports whether it was a fault.
// The data is valid until the next touch.
func (r *faultReader) touch(ctx context.Context, layer, x int, idx int64) ([]byte, bool, error) {
	r.mu.Lock()
	p, marked := r.pages.touch(idx)
	r.mu.Unlock()
	if p == nil {
		data, err := r.readAround(ctx, layer, x, idx)
		return data, true, err
	}
	if !marked {
		return p.data, false, nil
	}
	// The next window's pages may evict this one: keep its data.
	data := r.pageBuf[:copy(r.pageBuf, p.data)]
	return data, false, r.readAheadAsync(ctx, layer, x, idx)
}

// readAround is a fault at page idx: it reads the window around it and
// returns page idx's data.
func (r *faultReader) readAround(ctx context.Context, layer, x int, idx int64) ([]byte, error) {
	if r.raPages <= 1 {
		return r.readPages(ctx, layer, x, idx, idx+1, idx, -1)
	}
	start := max(0, idx-r.raPages/2)
	r.ra = naiveRA{start: start, size: r.raPages, async: r.raPages / 4}
	mark := int64(-1)
	if r.ra.async > 0 {
		mark = start + r.ra.size - r.ra.async
	}
	return r.readPages(ctx, layer, x, start, start+r.ra.size, idx, mark)
}

// readAheadAsync follows an access to the marked page idx: it reads the
// next window and marks its first page.
func (r *faultReader) readAheadAsync(ctx context.Context, layer, x int, idx int64) error {
	n := r.pages
	ra := &r.ra
	if idx == ra.start+ra.size-ra.async {
		ra.start += ra.size
		ra.size = nextRASize(ra.size, r.raPages)
	} else {
		// A mark the state does not expect (another window's): read on
		// from the first page missing within ra pages after it.
		r.mu.Lock()
		miss := idx + 1
		for miss <= idx+r.raPages && n.pages[miss] != nil {
			miss++
		}
		r.mu.Unlock()
		if miss > idx+r.raPages {
			return nil
		}
		ra.start = miss
		ra.size = nextRASize(miss-idx+r.raPages, r.raPages)
	}
	ra.async = ra.size
	_, err := r.readPages(ctx, layer, x, ra.start, ra.start+ra.size, -1, ra.start)
	return err
}

// nextRASize is the kernel's window growth (get_next_ra_size) capped at
// limit pages.
func nextRASize(cur, limit int64) int64 {
	switch {
	case cur < limit/16:
		return 4 * cur
	case cur <= limit/2:
		return 2 * cur
	}
	return limit
}

// readPages reads the pages of [lo, hi) that are not cached, one read per
// run of missing pages (at most the read window each), marks page mark if
// it was read, and returns page want's data (nil when want < 0). Pages
// past the end of the file are not read.
func (r *faultReader) readPages(ctx context.Context, layer, x int, lo, hi, want, mark int64) ([]byte, error) {
	n := r.pages
	hi = min(hi, (r.fileSize+r.page-1)/r.page)
	maxRun := int64(len(r.win)) / r.page
	var out []byte
	for i := lo; i < hi; {
		r.mu.Lock()
		for i < hi && n.pages[i] != nil {
			i++
		}
		j := i
		for j < hi && j-i < maxRun && n.pages[j] == nil {
			j++
		}
		r.mu.Unlock()
		if i == j {
			break
		}
		data, err := r.readRun(ctx, layer, x, i, j-i, want)
		if err != nil {
			return nil, err
		}
		if want >= i && want < j {
			out = data
		}
		if mark >= i && mark < j {
			r.mu.Lock()
			if p := n.pages[mark]; p != nil {
				p.mark = true
			}
			r.mu.Unlock()
		}
		i = j
	}
	return out, nil
}
