package expert

import (
	"math"
	"math/bits"
	"sync"
	"time"
)

// IOHist is a histogram of the store's preads by size and by queue depth:
// what the device was asked to do, in the terms of profile measure's grid
// (a read's size and the reads in flight while it was served), so the
// service times a store really got can be compared with the cells of the
// table its twin is priced by.
//
// A read's depth is the mean number of this store's preads in flight over
// its own service time (itself included), rounded: a read that ran alone
// has depth 1, one of eight reads issued together about 8. Sizes fall in
// power-of-two classes (a class holds sizes in (2^(k-1), 2^k]); the mean
// size of a cell is Bytes / Reads.
type IOHist struct {
	Cells [ioSizeClasses][ioDepths]IOCell
}

// IOCell counts the reads of one size class at one depth.
type IOCell struct {
	Reads int64
	Bytes int64
	Time  time.Duration // Σ service time (issue of the pread to its return)
	// DepthSum is Σ of the reads' unrounded mean depths.
	DepthSum float64
}

const (
	ioMinClass    = 12 // 4 KiB and below
	ioSizeClasses = 13 // 4 KiB ... 16 MiB (and above)
	ioDepths      = 32 // depth 1 ... 32 (and above)
)

// ioClass returns the size class of an n-byte read.
func ioClass(n int64) int {
	k := 0
	if n > 1 {
		k = bits.Len64(uint64(n - 1)) // smallest k with 2^k >= n
	}
	return min(max(k-ioMinClass, 0), ioSizeClasses-1)
}

// IOClassBytes returns the upper bound of size class c.
func IOClassBytes(c int) int64 { return 1 << (c + ioMinClass) }

func (h *IOHist) add(n int64, d time.Duration, depth float64) {
	q := min(max(int(math.Round(depth)), 1), ioDepths) - 1
	c := &h.Cells[ioClass(n)][q]
	c.Reads++
	c.Bytes += n
	c.Time += d
	c.DepthSum += depth
}

// Sub returns h − before, cell by cell.
func (h IOHist) Sub(before IOHist) IOHist {
	for i := range h.Cells {
		for j := range h.Cells[i] {
			c, b := &h.Cells[i][j], before.Cells[i][j]
			c.Reads -= b.Reads
			c.Bytes -= b.Bytes
			c.Time -= b.Time
			c.DepthSum -= b.DepthSum
		}
	}
	return h
}

// Add adds d's cells to h.
func (h *IOHist) Add(d IOHist) {
	for i := range h.Cells {
		for j := range h.Cells[i] {
			c, x := &h.Cells[i][j], d.Cells[i][j]
			c.Reads += x.Reads
			c.Bytes += x.Bytes
			c.Time += x.Time
			c.DepthSum += x.DepthSum
		}
	}
}

// Total returns the reads, bytes and service time of all cells.
func (h IOHist) Total() IOCell {
	var t IOCell
	for i := range h.Cells {
		for _, c := range h.Cells[i] {
			t.Reads += c.Reads
			t.Bytes += c.Bytes
			t.Time += c.Time
			t.DepthSum += c.DepthSum
		}
	}
	return t
}

// ioMeter measures the store's preads into an IOHist: it tracks the
// preads in flight and the time integral of that count, so each read's
// mean depth over its own service is exact however reads overlap.
type ioMeter struct {
	mu       sync.Mutex
	inflight int
	last     time.Time
	area     float64 // Σ inflight × elapsed nanoseconds
	hist     IOHist
}

func (m *ioMeter) tickLocked(now time.Time) {
	if !m.last.IsZero() {
		m.area += float64(float64(m.inflight) * float64(now.Sub(m.last)))
	}
	m.last = now
}

// begin marks a pread's start; pass its results to end.
func (m *ioMeter) begin() (time.Time, float64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	m.tickLocked(now)
	m.inflight++
	return now, m.area
}

// end records a pread of n bytes begun at t0 (area a0).
func (m *ioMeter) end(t0 time.Time, a0 float64, n int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	m.tickLocked(now)
	m.inflight--
	d := now.Sub(t0)
	depth := 1.0
	if d > 0 {
		depth = (m.area - a0) / float64(d)
	}
	m.hist.add(n, d, depth)
}

func (m *ioMeter) snapshot() IOHist {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.hist
}

func (m *ioMeter) reset() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.hist = IOHist{}
}
