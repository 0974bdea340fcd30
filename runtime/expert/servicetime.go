package expert

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// ServiceTimes is a device's measured read service times: the mean time
// from issue to completion of a random read of each size at each queue
// depth (lesfarm profile measure's O_DIRECT grid). A profile that carries
// one charges every emulated read by it instead of one latency and one
// bandwidth for all sizes (the simple form the built-in profiles keep).
//
// The model (ReadCost): a read of n bytes costs a latency L(n), which
// overlaps with other reads' latencies, plus a transfer of n bytes at the
// device's saturated throughput B(n), which reads share. B(n) is the best
// throughput of reads of that size over the measured queue depths (the
// queue depths say how much parallelism the device has for that size), and
// L(n) the QD-1 time less the transfer, so one synchronous read takes
// exactly the measured QD-1 time and many concurrent ones move at the
// measured saturated rate. Between measured sizes both the QD-1 time and
// the transfer time are interpolated linearly in the size; below the
// smallest the QD-1 time is the smallest size's and the transfer scales
// with the bytes; above the largest both scale with the bytes (the largest
// size's rates). Measurements of a loaded device are noisy, so times are
// made non-decreasing in the size before use, by lowering a size's time
// to a bigger size's (a stall inflates a cell; nothing makes one fast).
// That is the real-time throttle's model. The device clock instead shares
// the device among the reads in flight at the table's throughput for
// their depth (ReadTime, deviceflash.go).
//
// Build one with NewServiceTimes and do not change it afterwards; it is
// then safe for concurrent use.
type ServiceTimes struct {
	Sizes       []int64           // read sizes in bytes, increasing
	QueueDepths []int             // queue depths, increasing
	Times       [][]time.Duration // Times[i][j]: size i at queue depth j
	// Patterns, if set, names per size how the row was read (a Pattern*
	// constant): it documents the measurement and does not change the
	// pricing. nil: every row random.
	Patterns []string

	qd1  []time.Duration // monotone QD-1 time per size
	xfer []time.Duration // monotone transfer time per size
	// grid is Times made monotone: no size slower than a bigger one at
	// the same depth, no depth with less throughput than a shallower one.
	grid [][]time.Duration
}

// The access patterns a service-time row is measured with (lesfarm
// profile measure reads each size as the store reads it).
const (
	// PatternRandom: one pread per read at a random 4 KiB-aligned offset
	// of the file, each reader on its own.
	PatternRandom = "random"
	// PatternLayer: the reads of a prefetch batch: blocks of the size at
	// the offsets of one layer's adjacent expert blobs, a layer's routed
	// set shared by the readers in flight, then the next layer's.
	PatternLayer = "layer"
	// PatternPages: the naive mode's fault: one preadv of page-sized
	// buffers (the block layer splits it into requests of its segment
	// limit) at a random page-aligned offset.
	PatternPages = "pages"
)

// ValidPattern reports whether p names a service-time row's pattern.
func ValidPattern(p string) bool {
	return p == PatternRandom || p == PatternLayer || p == PatternPages
}

// Limits of a service-time table.
const (
	maxServiceRows = 64
	maxServiceTime = 10 * time.Second
	maxServiceSize = 1 << 30
)

// NewServiceTimes validates a table (sizes and queue depths increasing,
// one positive time per cell) and prepares it for ReadCost.
func NewServiceTimes(sizes []int64, depths []int, times [][]time.Duration) (*ServiceTimes, error) {
	if len(sizes) == 0 || len(depths) == 0 {
		return nil, errors.New("needs at least one read size and one queue depth")
	}
	if len(sizes) > maxServiceRows || len(depths) > maxServiceRows {
		return nil, fmt.Errorf("has %d sizes and %d queue depths; at most %d of each", len(sizes), len(depths), maxServiceRows)
	}
	for j, q := range depths {
		if q < 1 || q > 1024 {
			return nil, fmt.Errorf("queue depth %d must be between 1 and 1024", q)
		}
		if j > 0 && q <= depths[j-1] {
			return nil, fmt.Errorf("queue depths must increase (%d after %d)", q, depths[j-1])
		}
	}
	if len(times) != len(sizes) {
		return nil, fmt.Errorf("has %d rows of times for %d sizes", len(times), len(sizes))
	}
	for i, n := range sizes {
		if n < 512 || n > maxServiceSize {
			return nil, fmt.Errorf("read size %d must be between 512 bytes and 1GiB", n)
		}
		if i > 0 && n <= sizes[i-1] {
			return nil, fmt.Errorf("read sizes must increase (%d after %d)", n, sizes[i-1])
		}
		if len(times[i]) != len(depths) {
			return nil, fmt.Errorf("size %d has %d times for %d queue depths", n, len(times[i]), len(depths))
		}
		for j, d := range times[i] {
			if d <= 0 || d > maxServiceTime {
				return nil, fmt.Errorf("size %d at queue depth %d: time %v must be between 0 and 10s", n, depths[j], d)
			}
		}
	}
	s := &ServiceTimes{Sizes: slices.Clone(sizes), QueueDepths: slices.Clone(depths), Times: make([][]time.Duration, len(times))}
	for i := range times {
		s.Times[i] = slices.Clone(times[i])
	}
	s.prepare()
	return s, nil
}

// WithPatterns returns s with each row's pattern set (one per size, each
// a Pattern* constant), or an error naming the bad one.
func (s *ServiceTimes) WithPatterns(patterns []string) (*ServiceTimes, error) {
	if len(patterns) != len(s.Sizes) {
		return nil, fmt.Errorf("has %d patterns for %d sizes", len(patterns), len(s.Sizes))
	}
	for i, p := range patterns {
		if !ValidPattern(p) {
			return nil, fmt.Errorf("size %d: pattern %q is not %s, %s or %s", s.Sizes[i], p, PatternRandom, PatternLayer, PatternPages)
		}
	}
	t := *s
	t.Patterns = slices.Clone(patterns)
	return &t, nil
}

// Pattern returns how row i was measured (PatternRandom when unrecorded).
func (s *ServiceTimes) Pattern(i int) string {
	if i < len(s.Patterns) && s.Patterns[i] != "" {
		return s.Patterns[i]
	}
	return PatternRandom
}

// Remeasured returns a copy of s whose cells at (size, depth) are
// replaced by times (a fresh measurement of part of the grid: the twin
// check's calibration before each repetition); cells not in the table are
// ignored. The other cells and the patterns stay.
func (s *ServiceTimes) Remeasured(times map[ServiceCell]time.Duration) (*ServiceTimes, error) {
	rows := make([][]time.Duration, len(s.Times))
	for i, n := range s.Sizes {
		rows[i] = slices.Clone(s.Times[i])
		for j, q := range s.QueueDepths {
			if d, ok := times[ServiceCell{Size: n, Depth: q}]; ok {
				rows[i][j] = d
			}
		}
	}
	t, err := NewServiceTimes(s.Sizes, s.QueueDepths, rows)
	if err != nil {
		return nil, err
	}
	t.Patterns = slices.Clone(s.Patterns)
	return t, nil
}

// ServiceCell names one cell of a service-time table.
type ServiceCell struct {
	Size  int64
	Depth int
}

// prepare derives the monotone QD-1 and transfer times per size. A cell
// of a loaded device's grid that took longer than a bigger read is an
// outlier (a stall of the shared disk), so each size's times are lowered
// to the bigger sizes' where those are faster, never raised.
func (s *ServiceTimes) prepare() {
	k := len(s.Sizes)
	s.qd1 = make([]time.Duration, k)
	s.xfer = make([]time.Duration, k)
	for i, n := range s.Sizes {
		// The QD-1 time is the first column's when it is QD 1; a table
		// that starts deeper gives the time a read takes at its
		// shallowest depth, an upper bound of the QD-1 time.
		best := 0.0 // bytes per second
		for j, q := range s.QueueDepths {
			best = max(best, float64(q)*float64(n)/s.Times[i][j].Seconds())
		}
		s.qd1[i], s.xfer[i] = s.Times[i][0], secs(float64(n)/best)
	}
	s.grid = make([][]time.Duration, k)
	for i := k - 1; i >= 0; i-- {
		s.grid[i] = slices.Clone(s.Times[i])
		for j := range s.grid[i] {
			if i < k-1 {
				s.grid[i][j] = min(s.grid[i][j], s.grid[i+1][j])
			}
			if j > 0 { // at least the shallower depth's throughput
				q, p := float64(s.QueueDepths[j]), float64(s.QueueDepths[j-1])
				s.grid[i][j] = min(s.grid[i][j], time.Duration(float64(s.grid[i][j-1])*q/p))
			}
		}
	}
	for i := k - 1; i >= 0; i-- {
		if i < k-1 {
			s.qd1[i] = min(s.qd1[i], s.qd1[i+1])
			s.xfer[i] = min(s.xfer[i], s.xfer[i+1])
		}
		s.xfer[i] = min(s.xfer[i], s.qd1[i])
	}
}

// ReadCost returns what a read of n bytes costs the device: its latency,
// which overlaps with other reads', and its transfer time at the device's
// saturated throughput, which reads share.
func (s *ServiceTimes) ReadCost(n int64) (latency, transfer time.Duration) {
	t1, x := s.interp(max(n, 1))
	return t1 - x, x
}

// interp returns the QD-1 time and transfer time of an n-byte read.
func (s *ServiceTimes) interp(n int64) (qd1, xfer time.Duration) {
	k := len(s.Sizes)
	switch {
	case n <= s.Sizes[0]:
		return s.qd1[0], scaleDur(s.xfer[0], n, s.Sizes[0])
	case n >= s.Sizes[k-1]:
		return scaleDur(s.qd1[k-1], n, s.Sizes[k-1]), scaleDur(s.xfer[k-1], n, s.Sizes[k-1])
	}
	i, _ := slices.BinarySearch(s.Sizes, n) // Sizes[i-1] < n <= Sizes[i]
	a, b := s.Sizes[i-1], s.Sizes[i]
	f := float64(n-a) / float64(b-a)
	lerp := func(x, y time.Duration) time.Duration { return x + time.Duration(f*float64(y-x)) }
	return lerp(s.qd1[i-1], s.qd1[i]), lerp(s.xfer[i-1], s.xfer[i])
}

func scaleDur(d time.Duration, n, of int64) time.Duration {
	return time.Duration(float64(d) * float64(n) / float64(of))
}

// marshal writes the table as a profile's service_times section.
func (s *ServiceTimes) marshal(b *strings.Builder) {
	b.WriteString("service_times:\n  queue_depths: [")
	for j, q := range s.QueueDepths {
		if j > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(b, "%d", q)
	}
	b.WriteString("]\n  reads:\n")
	for i, n := range s.Sizes {
		fmt.Fprintf(b, "    - {size: %d, ", n)
		if i < len(s.Patterns) && s.Patterns[i] != "" {
			fmt.Fprintf(b, "pattern: %s, ", s.Patterns[i])
		}
		b.WriteString("times: [")
		for j, d := range s.Times[i] {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteString(d.String())
		}
		b.WriteString("]}\n")
	}
}

// Equal reports whether s and t hold the same table (nil equals nil).
func (s *ServiceTimes) Equal(t *ServiceTimes) bool {
	if s == nil || t == nil {
		return s == t
	}
	if !slices.Equal(s.Sizes, t.Sizes) || !slices.Equal(s.QueueDepths, t.QueueDepths) || len(s.Times) != len(t.Times) {
		return false
	}
	for i := range s.Sizes {
		if s.Pattern(i) != t.Pattern(i) {
			return false
		}
	}
	for i := range s.Times {
		if !slices.Equal(s.Times[i], t.Times[i]) {
			return false
		}
	}
	return true
}

// ReadCost returns what the profile's device charges a read of n bytes:
// its latency (overlapping other reads') and its transfer time (sharing
// the device's bandwidth). With a measured table it is the table's
// (ServiceTimes.ReadCost); otherwise the profile's one latency and n bytes
// at its bandwidth.
func (p *Profile) ReadCost(n int64) (latency, transfer time.Duration) {
	if p.Service != nil {
		return p.Service.ReadCost(n)
	}
	return p.Latency, secs(float64(n) / p.Bandwidth)
}

// runsCost returns the latency of each of runs preads totalling n bytes,
// issued one after the other, and their total transfer time: with a
// measured table each pread is priced at its own size.
func (p *Profile) runsCost(n int64, runs int) (latency, transfer time.Duration) {
	if p.Service == nil || runs <= 1 {
		return p.ReadCost(n)
	}
	lat, x := p.Service.ReadCost(n / int64(runs))
	return lat, time.Duration(runs) * x
}

// ReadTime returns the table's mean time per read of n bytes with depth
// reads in flight: the measured cells (made monotone: see grid)
// interpolated linearly in the size
// (between measured sizes; beyond them scaled with the bytes) and in the
// throughput between measured queue depths (beyond them the nearest
// depth's throughput). It is what the measured grid says a store's read
// of that size at that depth should take (IOHist).
func (s *ServiceTimes) ReadTime(n int64, depth float64) time.Duration {
	depth = max(depth, 1)
	col := func(j int) time.Duration { return s.sizeTime(n, j) }
	k := len(s.QueueDepths)
	switch {
	case depth <= float64(s.QueueDepths[0]):
		return col(0)
	case depth >= float64(s.QueueDepths[k-1]):
		// Beyond the deepest measured queue, the throughput stays.
		return time.Duration(float64(col(k-1)) * depth / float64(s.QueueDepths[k-1]))
	}
	j := 1
	for float64(s.QueueDepths[j]) < depth {
		j++
	}
	qa, qb := float64(s.QueueDepths[j-1]), float64(s.QueueDepths[j])
	xa, xb := qa/col(j-1).Seconds(), qb/col(j).Seconds() // reads per second
	f := (depth - qa) / (qb - qa)
	return secs(depth / (xa + float64(f*(xb-xa))))
}

// sizeTime is column j's time for an n-byte read, linear in the size
// between measured sizes and scaled with the bytes beyond them.
func (s *ServiceTimes) sizeTime(n int64, j int) time.Duration {
	k := len(s.Sizes)
	switch {
	case n <= s.Sizes[0]:
		return s.grid[0][j]
	case n >= s.Sizes[k-1]:
		return scaleDur(s.grid[k-1][j], n, s.Sizes[k-1])
	}
	i, _ := slices.BinarySearch(s.Sizes, n)
	a, b := s.Sizes[i-1], s.Sizes[i]
	f := float64(n-a) / float64(b-a)
	return s.grid[i-1][j] + time.Duration(f*float64(s.grid[i][j]-s.grid[i-1][j]))
}
