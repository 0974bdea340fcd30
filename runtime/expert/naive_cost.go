package expert

import "time"

// MeasurePageCost measures this host's CPU cost per page of the naive
// mode's page cache: for each page a fault reads, the work the store does
// besides the read itself (evicting the least recently used page, taking
// its buffer, inserting the new page and later looking it up), which a
// kernel does inside its fault. It runs the cache's own code over a
// synthetic stream of page runs, outside any I/O, and returns the fastest
// of a few rounds (the host's speed with a CPU to itself, not its load).
// profile measure records it as the profile's compute.page_cost, so the
// twin of a device charges the naive mode's page handling as the device's
// compute (MeasurePageCost on the device itself).
func MeasurePageCost() time.Duration {
	const (
		page    = DefaultPageSize
		cached  = 4096 // pages the cache holds (16 MiB)
		run     = 256  // pages per fault
		perRnd  = 64 << 10
		rounds  = 5
		stretch = 4 * cached // distinct pages cycled through
	)
	n := newPageCache(page, cached*page)
	next := int64(0)
	one := func() {
		idx := next
		next = (next + run) % stretch
		bufs := n.reserve(run, false)
		if bufs == nil { // no readv here: the window path copies each page
			for i := range int64(run) {
				n.evictFor(page)
				n.insertBuf(idx+i, n.takeBuf())
			}
		} else {
			for i, b := range bufs {
				n.insertBuf(idx+int64(i), b)
			}
		}
		for i := range int64(run) {
			n.touch(idx + i)
		}
	}
	for range cached / run { // fill the cache first
		one()
	}
	best := time.Duration(0)
	for range rounds {
		t0 := time.Now()
		for range perRnd / run {
			one()
		}
		if d := time.Since(t0) / perRnd; best == 0 || d < best {
			best = d
		}
	}
	return max(best, time.Nanosecond)
}
