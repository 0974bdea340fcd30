package calibrate

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"time"

	"github.com/lesfarm/lesfarm/runtime/expert"
)

// gridFile is a file the read grid reads, with how the store would read
// it: the layer geometry of the layer pattern and the page size of the
// pages pattern.
type gridFile struct {
	f      *os.File
	size   int64 // bytes readable at aligned offsets
	direct bool
	geom   expertGeometry
	page   int64
}

// openGrid opens path for the grid's O_DIRECT reads.
func openGrid(path string, geom expertGeometry, page int64) (*gridFile, error) {
	f, direct, err := expert.OpenForReads(path, true)
	if err != nil {
		return nil, fmt.Errorf("calibrate: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("calibrate: %w", err)
	}
	if geom.experts <= 0 {
		geom.experts = 32
	}
	if geom.used <= 0 || geom.used > geom.experts {
		geom.used = min(8, geom.experts)
	}
	return &gridFile{f: f, size: st.Size() / expert.DirectAlign * expert.DirectAlign, direct: direct, geom: geom, page: max(page, expert.DirectAlign)}, nil
}

func (g *gridFile) Close() error { return g.f.Close() }

// offsets hands the readers of one cell their offsets, by the pattern:
// random (each reader its own random aligned offsets), layer (one
// layer's routed set of adjacent expert blocks at a time, shared by the
// readers, the next layer's after it, as a store's misses and prefetches
// of a token go) or pages (random page-aligned offsets).
type offsets struct {
	pattern string
	block   int64
	align   int64
	slots   int64 // aligned offsets that fit a block

	mu     sync.Mutex
	rng    *rand.Rand
	layers int64 // layer regions of experts × block bytes in the file
	per    int   // blocks per layer region
	used   int
	layer  int64
	set    []int
}

func newOffsets(g *gridFile, pattern string, block int64) *offsets {
	o := &offsets{pattern: pattern, block: block, align: expert.DirectAlign, rng: rand.New(rand.NewPCG(uint64(block), 7))}
	if pattern == expert.PatternPages {
		o.align = g.page
	}
	o.slots = max((g.size-block)/o.align, 1)
	if pattern == expert.PatternLayer {
		o.per = min(g.geom.experts, int(g.size/block))
		o.used = min(g.geom.used, o.per)
		o.layers = max(g.size/(int64(o.per)*block), 1)
		o.layer = o.rng.Int64N(o.layers)
	}
	return o
}

// next returns reader w's next offset (rng is the reader's own).
func (o *offsets) next(rng *rand.Rand) int64 {
	if o.pattern != expert.PatternLayer {
		return rng.Int64N(o.slots) * o.align
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.set) == 0 {
		o.layer = (o.layer + 1) % o.layers
		o.set = o.rng.Perm(o.per)[:o.used]
	}
	e := o.set[0]
	o.set = o.set[1:]
	return (o.layer*int64(o.per) + int64(e)) * o.block
}

// cell reads block-sized pieces by pattern with qd readers in a closed
// loop for d (at least minReads per reader), and returns the throughput
// and mean time per read.
func (g *gridFile) cell(ctx context.Context, block int64, qd int, d time.Duration, pattern string) (Cell, error) {
	if block > g.size/2 {
		return Cell{}, fmt.Errorf("calibrate: the file of %d bytes is too small for %d-byte reads", g.size, block)
	}
	o := newOffsets(g, pattern, block)
	// A deep queue of big reads meets its minimum count late: two reads
	// each bound a cell of 32 MiB or more in flight.
	minReads := int64(8)
	if int64(qd)*block >= 32<<20 {
		minReads = 2
	}
	var mu sync.Mutex
	var reads int64
	var lat time.Duration
	var firstErr error
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	for w := range qd {
		wg.Add(1)
		go func() {
			defer wg.Done()
			read := g.reader(block, pattern)
			rng := rand.New(rand.NewPCG(uint64(block), uint64(w)))
			var n int64
			var l time.Duration
			for n < minReads || time.Now().Before(deadline) {
				if ctx.Err() != nil {
					break
				}
				off := o.next(rng)
				t0 := time.Now()
				if err := read(off); err != nil {
					mu.Lock()
					firstErr = cmpErr(firstErr, err)
					mu.Unlock()
					return
				}
				l += time.Since(t0)
				n++
			}
			mu.Lock()
			reads += n
			lat += l
			mu.Unlock()
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return Cell{}, err
	}
	if firstErr != nil {
		return Cell{}, fmt.Errorf("calibrate: reading %s: %w", g.f.Name(), firstErr)
	}
	el := time.Since(start)
	return Cell{Block: block, QD: qd, Pattern: pattern, Reads: reads, BytesPerS: float64(reads*block) / el.Seconds(), MeanLatency: lat / time.Duration(max(reads, 1))}, nil
}

// reader returns one reader's read of block bytes at an offset: one pread
// into an aligned buffer, or for the pages pattern one preadv into
// separately allocated page buffers, as the naive mode's fault reads
// (where preadv is not available, one pread of the same bytes).
func (g *gridFile) reader(block int64, pattern string) func(off int64) error {
	if pattern == expert.PatternPages {
		bufs := make([][]byte, block/g.page)
		for i := range bufs {
			bufs[i] = expert.AlignedBuffer(g.page)
		}
		var fallback func(int64) error
		return func(off int64) error {
			if fallback != nil {
				return fallback(off)
			}
			_, err := expert.ReadPages(g.f, bufs, off)
			if errors.Is(err, errors.ErrUnsupported) {
				fallback = g.reader(block, expert.PatternRandom)
				return fallback(off)
			}
			return err
		}
	}
	buf := expert.AlignedBuffer(block)
	return func(off int64) error {
		_, err := g.f.ReadAt(buf, off)
		return err
	}
}
