package expert

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"time"

	"github.com/lesfarm/lesfarm/runtime/moe"
)

// reader gets an expert's data from the model file: the store's storage,
// one strategy per kind of device, chosen by New from the options.
//
//   - fileReader reads the file at its real speed: through the page
//     cache, or direct (O_DIRECT; F_NOCACHE on Darwin), where every read
//     hits the disk (Options.Direct).
//   - flashReader is a fileReader paced as a profile's emulated flash
//     (Throttle): each read then takes as long as the device would
//     (Options.Profile without device time).
//   - faultReader (naive.go) is the naive mode's: it assembles an expert
//     from a page cache (pageCache), faulting the missing pages in through
//     a fileReader or flashReader as a mapping of the file would.
//
// Under device time the store reads with a fileReader and the device clock
// prices each read instead (deviceclock.go, deviceflash.go). The cache
// modes' workers call expert concurrently (fileReader and flashReader are
// safe for that); the naive mode calls it from the model goroutine, one
// Use at a time.
type reader interface {
	// expert reads expert k into buf (the cache modes; the naive mode
	// reads into its own assembly buffer and ignores buf) and returns its
	// weights, which alias the buffer. spec, when not nil, is true while
	// the read is speculative, so an emulated device serves it after
	// demanded reads. It returns early with ctx's error.
	expert(ctx context.Context, k Key, buf []byte, spec *atomic.Bool) (fetched, error)
}

// fetched is what one reader.expert call did.
type fetched struct {
	w      moe.Weights
	n      int64 // bytes read from the file
	runs   int   // preads
	faults int   // pages not cached (faultReader); 0 for the others
}

// pager reads runs of whole pages of the model file: what a faultReader
// faults in through. fileReader and flashReader implement it.
type pager interface {
	// pages reads from off into bufs (one preadv of page-sized buffers)
	// when bufs is not nil, else into win, and returns the bytes read. A
	// read cut short by the end of the file is not an error unless it
	// read nothing.
	pages(ctx context.Context, bufs [][]byte, win []byte, off int64, iov *[]iovec) (int, error)
	// isDirect reports whether reads bypass the page cache (buffers must
	// then be aligned).
	isDirect() bool
}

// fileReader reads experts and pages from the model file at the file's
// real speed: buffered, or direct when the file was opened with O_DIRECT
// (openModel), in which case reads are aligned to align. It counts every
// pread in io. It is safe for concurrent use; the zero value is not
// usable.
type fileReader struct {
	f      *os.File
	path   string
	direct bool  // O_DIRECT (F_NOCACHE) in use
	align  int64 // read alignment: directAlign when direct or emulated, else 1
	layout Layout
	io     *ioMeter
}

// expert implements reader: it preads the expert's runs (planRead) into
// buf.
func (r *fileReader) expert(_ context.Context, k Key, buf []byte, _ *atomic.Bool) (fetched, error) {
	parts := r.layout.Experts[k.Layer][k.Expert]
	p := planRead(parts, r.align)
	var total int64
	for _, run := range p.runs {
		dst := buf[run.bufOff : run.bufOff+run.n]
		t0, a0 := r.io.begin()
		n, err := r.f.ReadAt(dst, run.off)
		r.io.end(t0, a0, run.n)
		total += int64(n)
		// The last aligned read of a file may stop at its end; only the
		// expert's own bytes must be there.
		need := int64(0)
		for _, x := range p.parts {
			if x.Off >= run.bufOff && x.Off < run.bufOff+run.n {
				need = max(need, x.Off+x.Len-run.bufOff)
			}
		}
		if int64(n) < need {
			if err == nil || errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return fetched{n: total, runs: len(p.runs)}, fmt.Errorf("expert: reading %v from %s (bytes %d-%d): %w (file truncated or changed under the runtime?)", k, r.path, run.off, run.off+need, err)
		}
	}
	part := func(i int) []byte { x := p.parts[i]; return buf[x.Off : x.Off+x.Len : x.Off+x.Len] }
	return fetched{w: moe.Weights{Gate: part(0), Up: part(1), Down: part(2)}, n: total, runs: len(p.runs)}, nil
}

// pages implements pager.
func (r *fileReader) pages(_ context.Context, bufs [][]byte, win []byte, off int64, iov *[]iovec) (int, error) {
	var got int
	var err error
	size := int64(len(win))
	if bufs != nil {
		size = int64(len(bufs)) * int64(len(bufs[0]))
	}
	t0, a0 := r.io.begin()
	if bufs != nil {
		got, err = preadPages(r.f, bufs, off, iov)
	} else {
		got, err = r.f.ReadAt(win, off)
	}
	r.io.end(t0, a0, size)
	switch {
	case err != nil && !errors.Is(err, io.EOF):
		return got, fmt.Errorf("expert: reading %s at %d: %w", r.path, off, err)
	case got == 0:
		return 0, fmt.Errorf("expert: reading %s at %d: %w (file truncated?)", r.path, off, io.ErrUnexpectedEOF)
	}
	return got, nil
}

func (r *fileReader) isDirect() bool { return r.direct }

// flashReader reads through a fileReader and then waits as long as the
// profile's emulated flash would take for the read (Throttle.Wait), on a
// timeline shared by the store's workers: the store's storage under a
// profile without device time. It is safe for concurrent use.
type flashReader struct {
	*fileReader
	throttle *Throttle
}

// expert implements reader. The runs of an expert are issued one after the
// other, so each costs the device's per-read latency: a compat-layout
// expert (two runs) pays it twice, a packed blob once.
func (r *flashReader) expert(ctx context.Context, k Key, buf []byte, spec *atomic.Bool) (fetched, error) {
	start := time.Now()
	f, err := r.fileReader.expert(ctx, k, buf, spec)
	if err != nil {
		return f, err
	}
	issued := start.Add(time.Duration(f.runs-1) * r.throttle.latency(f.n/int64(f.runs)))
	return f, r.throttle.Wait(ctx, issued, f.n, spec)
}

// pages implements pager: one synchronous read of the device (a page
// fault's), never speculative.
func (r *flashReader) pages(ctx context.Context, bufs [][]byte, win []byte, off int64, iov *[]iovec) (int, error) {
	start := time.Now()
	got, err := r.fileReader.pages(ctx, bufs, win, off, iov)
	if err != nil {
		return got, err
	}
	return got, r.throttle.Wait(ctx, start, int64(got), nil)
}
