package calibrate

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/lesfarm/lesfarm/runtime/expert"
)

// measureGrid measures the read grid of cfg into res.Cells: each size by
// its pattern (Config.pattern), on cfg.ReadFile or a test file written in
// tmp, the pages rows on cfg.PageFile when set.
func measureGrid(ctx context.Context, cfg *Config, res *Result, tmp string, progress func(string, ...any)) error {
	path := cfg.ReadFile
	if path == "" {
		path = filepath.Join(tmp, "flash.bin")
		if err := writeTestFile(ctx, path, cfg.FileBytes); err != nil {
			return err
		}
		progress("flash: wrote a %d MiB test file in %s", cfg.FileBytes>>20, cfg.Dir)
	} else {
		res.ReadFile = path
		progress("flash: reading %s (%d MiB) as it is", path, cfg.FileBytes>>20)
	}
	page := int64(os.Getpagesize())
	g, err := openGrid(path, cfg.geom, page)
	if err != nil {
		return err
	}
	defer g.Close()
	pg := g
	if cfg.PageFile != "" && cfg.PageFile != path {
		if pg, err = openGrid(cfg.PageFile, cfg.geom, page); err != nil {
			return err
		}
		defer pg.Close()
		res.PageFile = cfg.PageFile
	}
	res.Direct = g.direct
	// Warm up the device (the test file's writeback may still occupy it)
	// with one unrecorded cell of the grid's first size, so the first
	// recorded cell is not a stall.
	if _, err := g.cell(ctx, cfg.BlockSizes[0], 1, cfg.CellTime, expert.PatternRandom); err != nil {
		return err
	}
	if !g.direct {
		progress("flash: O_DIRECT is not supported here; reads go through the page cache and measure it, not the flash")
	}
	for _, b := range cfg.BlockSizes {
		pat := cfg.pattern(b)
		for _, qd := range cfg.QueueDepths {
			f := g
			if pat == expert.PatternPages {
				f = pg
			}
			cell, err := f.cell(ctx, b, qd, cfg.CellTime, pat)
			if err != nil {
				return err
			}
			res.Cells = append(res.Cells, cell)
			progress("flash: %7d B × QD %2d (%s): %8.1f MB/s, %7.1f µs per read", b, qd, pat, cell.BytesPerS/1e6, float64(cell.MeanLatency.Nanoseconds())/1e3)
		}
	}
	return nil
}

// defaultPageRuns returns the sizes naive's faults read on the storage of
// dir: its read-ahead window (the block device's read_ahead_kb, else
// Linux's default 128 KiB) and an eighth, a quarter and half of it, in
// whole pages of at least two (naive's runs are up to a window; a page
// vector of a size reads slower than one pread of it, 12.6 against 3.8 ms
// for naive's 1 MiB runs in one twin check, so a run is priced from page
// rows at every size it has).
func defaultPageRuns(dir string) []int64 {
	page := int64(os.Getpagesize())
	ra := int64(expert.DirectReadAhead)
	if n, ok := expert.DeviceReadAhead(dir); ok && n > 0 {
		ra = n
	}
	ra = max(ra/page*page, 2*page)
	var runs []int64
	for _, d := range []int64{8, 4, 2} {
		if r := ra / d / page * page; r >= 2*page {
			runs = append(runs, r)
		}
	}
	return slices.Compact(append(runs, ra))
}

// CellSpec is one cell of the read grid to measure: a read size, a queue
// depth and the pattern to read it by (an expert.Pattern* constant).
type CellSpec struct {
	Block   int64
	QD      int
	Pattern string
}

// Cells measures the given cells of the grid now, each for cellTime, on
// the files a store reads: the layer and random cells on experts (a
// packed model), the pages cells on pages (the unpacked model naive
// reads; default experts), with model's layer geometry. The twin check
// calls it before each repetition so the twin is priced by the disk of
// that minute.
func Cells(ctx context.Context, experts, pages, model string, cellTime time.Duration, specs []CellSpec) ([]Cell, error) {
	var geom expertGeometry
	if model != "" {
		var err error
		if geom, err = modelGeometry(model); err != nil {
			return nil, err
		}
	}
	page := int64(os.Getpagesize())
	g, err := openGrid(experts, geom, page)
	if err != nil {
		return nil, err
	}
	defer g.Close()
	pg := g
	if pages != "" && pages != experts {
		if pg, err = openGrid(pages, geom, page); err != nil {
			return nil, err
		}
		defer pg.Close()
	}
	out := make([]Cell, 0, len(specs))
	for _, sp := range specs {
		if sp.Block < expert.DirectAlign || sp.Block%expert.DirectAlign != 0 || sp.QD < 1 || sp.QD > 1024 || !expert.ValidPattern(sp.Pattern) {
			return nil, fmt.Errorf("calibrate: bad cell %+v", sp)
		}
		f := g
		if sp.Pattern == expert.PatternPages {
			f = pg
		}
		c, err := f.cell(ctx, sp.Block, sp.QD, cellTime, sp.Pattern)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}
