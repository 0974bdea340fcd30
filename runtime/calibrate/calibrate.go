// Package calibrate measures the device it runs on and writes what it
// measured as an expert storage profile (lesfarm profile measure), so a
// farm's emulated twin of a real device runs with that device's flash and
// compute: O_DIRECT random reads from 4 KiB to 4 MiB at queue depths 1 to
// 32, memory copy bandwidth, and decode compute speed on a reference
// model.
package calibrate

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/lesfarm/lesfarm/runtime/bench"
	"github.com/lesfarm/lesfarm/runtime/expert"
	"github.com/lesfarm/lesfarm/runtime/model"
	"github.com/lesfarm/lesfarm/runtime/tensor"
)

// Config configures Measure. Zero fields get the defaults noted.
type Config struct {
	Name string // profile name (required)
	// Dir is where the flash test file is written (default os.TempDir());
	// it must be on the storage to measure.
	Dir string
	// FileBytes is the size of the flash test file (default 512 MiB). The
	// reads are random over it; larger than the device's cache is better.
	FileBytes int64
	// BlockSizes and QueueDepths are the read grid (default 4 KiB to
	// 4 MiB by ×4, and 1, 2, 4, 8, 16, 32).
	BlockSizes  []int64
	QueueDepths []int
	// ExpertSizes are read sizes added to the grid: the reads a store
	// really issues (Measure adds the reference model's expert blob, the
	// read of one packed expert, when Model is set), so the emulated flash
	// prices them from a measured row instead of interpolating. They are
	// read as a store reads them (expert.PatternLayer): blocks of one
	// layer's adjacent expert blobs, the layer's routed set shared by the
	// readers in flight, then the next layer's.
	ExpertSizes []int64
	// PageRuns are read sizes read as the naive mode's faults read them
	// (expert.PatternPages: one preadv of page-sized buffers): with Model
	// set and the default BlockSizes, the read-ahead window and an
	// eighth, a quarter and half of it, the runs naive reads
	// (defaultPageRuns). A size in both lists is read as pages.
	PageRuns []int64
	// PageFile, if set, is the file the PageRuns rows read (the unpacked
	// model naive reads); default the grid's file.
	PageFile string
	// ReadFile, if set, is an existing file the grid reads (read-only,
	// O_DIRECT, random 4 KiB-aligned offsets) instead of a test file
	// written in Dir: the model file, to measure the device as the store
	// reads it, a file read over and over (whatever the layers below the
	// OS cache of it), where a fresh test file has not been read yet.
	ReadFile string
	// CellTime is how long each (block size, queue depth) cell reads
	// (default 150 ms; at least 8 reads per reader).
	CellTime time.Duration
	// CopyBytes is the memory copy benchmark's buffer (default 256 MiB).
	CopyBytes int64
	// Model is the reference model whose decode gives the compute speed;
	// empty synthesizes a small qwen3moe (4 layers, 16 experts, hidden
	// 1024, Q4_K) in Dir.
	Model string
	// Experts is the file the streamed compute measurement serves the
	// reference's experts from (its packed form; default the model).
	Experts string
	Threads int // decode threads (default 1, as the ladder)
	// Progress, if set, receives one line per finished step.
	Progress func(string)

	geom expertGeometry // of Model, for the layer pattern
}

// pattern returns how the grid reads block-sized reads.
func (c *Config) pattern(block int64) string {
	switch {
	case slices.Contains(c.PageRuns, block):
		return expert.PatternPages
	case slices.Contains(c.ExpertSizes, block):
		return expert.PatternLayer
	}
	return expert.PatternRandom
}

// Cell is one measured point of the read grid.
type Cell struct {
	Block       int64
	QD          int
	Pattern     string // how it was read (expert.PatternRandom, ...)
	Reads       int64
	BytesPerS   float64
	MeanLatency time.Duration
}

// Result is everything Measure measured; Profile is derived from it.
type Result struct {
	Profile   *expert.Profile
	Direct    bool // the flash reads bypassed the page cache
	Cells     []Cell
	CopyGBps  float64
	DecodeTPS float64
	// DecodeCPUTPS is the reference decode's tokens per CPU-second of the
	// process: its speed when it has the CPU, whatever else the host runs.
	DecodeCPUTPS float64
	// StreamedCPUTPS is the same decode's tokens per CPU-second with the
	// experts served by the store (bench.StreamedCPUPerToken), every
	// expert cached: the path the ladder's modes compute on.
	StreamedCPUTPS float64
	WeightGBTok    float64 // weight GB read per decoded token of the reference
	RefModel       string
	// PageCost is the naive mode's page-cache work per page on this host
	// (expert.MeasurePageCost), the profile's compute.page_cost.
	PageCost time.Duration
	// ReadFile is the existing file the grid read, or "" for a test file.
	ReadFile string
	// PageFile is the file the pages rows read, when not the grid's.
	PageFile string
	Measured time.Time
}

func (c *Config) defaults() error {
	if c.Name == "" {
		return errors.New("calibrate: the profile needs a name")
	}
	if c.Dir == "" {
		c.Dir = os.TempDir()
	}
	if c.FileBytes == 0 {
		c.FileBytes = 512 << 20
	}
	fullGrid := len(c.BlockSizes) == 0
	if fullGrid {
		c.BlockSizes = []int64{4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20}
	}
	if c.Model != "" {
		g, err := modelGeometry(c.Model)
		if err != nil {
			return err
		}
		c.geom = g
		c.ExpertSizes = append(c.ExpertSizes, g.read)
		if len(c.PageRuns) == 0 && fullGrid { // a grid asked for stays as asked
			c.PageRuns = defaultPageRuns(c.Dir)
		}
	}
	sizes := append(slices.Clone(c.BlockSizes), c.ExpertSizes...)
	sizes = append(sizes, c.PageRuns...)
	c.BlockSizes = slices.Compact(slices.Sorted(slices.Values(sizes)))
	if len(c.QueueDepths) == 0 {
		c.QueueDepths = []int{1, 2, 4, 8, 16, 32}
	}
	if c.CellTime == 0 {
		c.CellTime = 150 * time.Millisecond
	}
	if c.CopyBytes == 0 {
		c.CopyBytes = 256 << 20
	}
	c.Threads = max(c.Threads, 1)
	maxBlock := int64(0)
	for _, b := range c.BlockSizes {
		if b < expert.DirectAlign || b%expert.DirectAlign != 0 {
			return fmt.Errorf("calibrate: block size %d must be a positive multiple of %d", b, expert.DirectAlign)
		}
		maxBlock = max(maxBlock, b)
	}
	for _, q := range c.QueueDepths {
		if q < 1 || q > 1024 {
			return fmt.Errorf("calibrate: queue depth %d must be between 1 and 1024", q)
		}
	}
	if c.ReadFile != "" {
		st, err := os.Stat(c.ReadFile)
		if err != nil {
			return fmt.Errorf("calibrate: the file to read: %w", err)
		}
		if !st.Mode().IsRegular() {
			return fmt.Errorf("calibrate: the file to read, %s, is not a regular file", c.ReadFile)
		}
		c.FileBytes = st.Size() / expert.DirectAlign * expert.DirectAlign
	}
	if c.FileBytes < 4*maxBlock {
		return fmt.Errorf("calibrate: test file of %d bytes is too small for %d-byte reads", c.FileBytes, maxBlock)
	}
	return nil
}

// Measure measures the device and returns the result and the derived
// profile. It honours ctx: an interrupted measurement returns ctx's error
// and no result, and removes its temporary files.
func Measure(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	progress := func(format string, args ...any) {
		if cfg.Progress != nil {
			cfg.Progress(fmt.Sprintf(format, args...))
		}
	}
	tmp, err := os.MkdirTemp(cfg.Dir, "lesfarm-calibrate-")
	if err != nil {
		return nil, fmt.Errorf("calibrate: %w", err)
	}
	defer os.RemoveAll(tmp)
	res := &Result{Measured: time.Now().UTC()}

	// Flash.
	if err := measureGrid(ctx, &cfg, res, tmp, progress); err != nil {
		return nil, err
	}

	// Memory.
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	res.CopyGBps = bench.CopyBandwidth(cfg.CopyBytes, 5)
	progress("memory copy: %.2f GB/s", res.CopyGBps)

	// Compute.
	ref := cfg.Model
	if ref == "" {
		ref = filepath.Join(tmp, "reference.gguf")
		if err := writeReference(ref); err != nil {
			return nil, err
		}
		res.RefModel = "synthetic qwen3moe: 4 layers, 16 experts top-4, hidden 1024, expert FFN 512, Q4_K"
	} else {
		res.RefModel = ref
	}
	rep, err := bench.Run(ctx, bench.Config{Model: ref, Threads: []int{cfg.Threads}, Repetitions: 3, Warmup: 1, GenTokens: 16})
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("calibrate: reference model: %w", err)
	}
	var tg *bench.Row
	for i := range rep.Rows {
		if strings.HasPrefix(rep.Rows[i].Test, "tg") {
			tg = &rep.Rows[i]
		}
	}
	if tg == nil || tg.GBps <= 0 || tg.GFLOPs <= 0 {
		return nil, errors.New("calibrate: the reference model's decode measured nothing")
	}
	res.DecodeTPS, res.DecodeCPUTPS, res.WeightGBTok = tg.TPS, tg.CPUTPS, tg.WeightGB
	progress("compute: %.2f tok/s decode of the reference (%.2f per CPU-second), %.2f GB/s of weights, %.2f GFLOP/s", tg.TPS, tg.CPUTPS, tg.GBps, tg.GFLOPs)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// The same decode with the experts served by the store: its CPU per
	// token over the resident one's is what the streamed path costs.
	streamed, err := bench.StreamedCPUPerToken(ctx, ref, cfg.Experts, cfg.Threads, 2, 16)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("calibrate: reference model: %w", err)
	}
	res.StreamedCPUTPS = 1 / streamed.Seconds()
	progress("compute, experts through the store: %.2f tok per CPU-second (resident %.2f)", res.StreamedCPUTPS, res.DecodeCPUTPS)
	res.PageCost = expert.MeasurePageCost()
	progress("naive page cache: %v of CPU per page read", res.PageCost)
	res.Profile = derive(cfg, res, tg)
	return res, nil
}

// writeTestFile fills path with n random bytes and syncs it, so direct
// reads find real data on the device.
func writeTestFile(ctx context.Context, path string, n int64) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("calibrate: %w", err)
	}
	defer f.Close()
	r := rand.NewChaCha8([32]byte{1, 2, 3})
	buf := make([]byte, 4<<20)
	for done := int64(0); done < n; {
		if err := ctx.Err(); err != nil {
			return err
		}
		_, _ = r.Read(buf) // ChaCha8.Read never fails
		k := min(int64(len(buf)), n-done)
		if _, err := f.Write(buf[:k]); err != nil {
			return fmt.Errorf("calibrate: writing the test file: %w", err)
		}
		done += k
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("calibrate: %w", err)
	}
	return f.Close()
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

func writeReference(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("calibrate: %w", err)
	}
	c := model.SynthConfig{Layers: 4, Experts: 16, ExpertsUsed: 4, Hidden: 1024, ExpertFFN: 512, Heads: 8, KVHeads: 2, Vocab: 4096, Context: 256, Type: tensor.Q4_K, Seed: 1}
	if err := model.WriteSynthetic(f, c); err != nil {
		f.Close()
		return fmt.Errorf("calibrate: reference model: %w", err)
	}
	return f.Close()
}

// serviceTable returns the grid's mean read times as the profile's
// service-time table, by which the emulated flash prices each read, or
// nil if the grid is incomplete.
func serviceTable(cfg Config, cells []Cell) *expert.ServiceTimes {
	sizes := slices.Compact(slices.Sorted(slices.Values(cfg.BlockSizes)))
	depths := slices.Compact(slices.Sorted(slices.Values(cfg.QueueDepths)))
	times := make([][]time.Duration, len(sizes))
	patterns := make([]string, len(sizes))
	for i, b := range sizes {
		patterns[i] = cfg.pattern(b)
		times[i] = make([]time.Duration, len(depths))
		for j, q := range depths {
			for _, c := range cells {
				if c.Block == b && c.QD == q {
					times[i][j] = max(c.MeanLatency.Round(time.Microsecond), time.Microsecond)
				}
			}
			if times[i][j] == 0 {
				return nil
			}
		}
	}
	st, err := expert.NewServiceTimes(sizes, depths, times)
	if err != nil {
		return nil
	}
	if st, err = st.WithPatterns(patterns); err != nil {
		return nil
	}
	return st
}

// derive turns the measurements into a profile: bandwidth is the best
// throughput of the grid, latency the mean QD 1 read of the smallest block
// less its transfer time, max_in_flight the smallest queue depth whose
// smallest-block IOPS reach 90% of the best, RAM the machine's memory,
// page size the OS's, read-ahead the block device's read_ahead_kb, the
// service-time table the grid's mean read times, and
// compute the reference decode's weight bandwidth and arithmetic rate.
func derive(cfg Config, res *Result, tg *bench.Row) *expert.Profile {
	p := &expert.Profile{Name: cfg.Name}
	var best float64
	small := cfg.BlockSizes[0]
	for _, b := range cfg.BlockSizes {
		small = min(small, b)
	}
	var bestSmall float64
	for _, c := range res.Cells {
		best = max(best, c.BytesPerS)
		if c.Block == small {
			bestSmall = max(bestSmall, c.BytesPerS)
		}
	}
	p.Bandwidth = math.Round(max(best, 1<<20))
	p.MaxInFlight = 1
	for _, c := range res.Cells {
		if c.Block == small && c.BytesPerS >= 0.9*bestSmall {
			if p.MaxInFlight == 1 || c.QD < p.MaxInFlight {
				p.MaxInFlight = c.QD
			}
		}
	}
	for _, c := range res.Cells {
		if c.Block == small && c.QD == 1 {
			l := c.MeanLatency - time.Duration(float64(small)/p.Bandwidth*float64(time.Second))
			p.Latency = max(l, 0).Round(time.Microsecond)
		}
	}
	// The smallest queue depth at 90% of the best IOPS can be the largest
	// measured when the device keeps scaling; never below the QD-1 cell.
	p.MaxInFlight = max(p.MaxInFlight, 1)
	p.Service = serviceTable(cfg, res.Cells)
	p.RAMBudget = memTotal()
	p.PageSize = int64(os.Getpagesize())
	if p.PageSize < 4096 || p.PageSize&(p.PageSize-1) != 0 {
		p.PageSize = expert.DefaultPageSize
	}
	if ra, ok := expert.DeviceReadAhead(cfg.Dir); ok {
		p.ReadAhead = (ra + p.PageSize - 1) / p.PageSize * p.PageSize
	}
	scale := computeScale(cfg, tg) / streamedSlowdown(res)
	p.Compute = &expert.Compute{
		WeightBandwidth: math.Round(tg.GBps * scale * 1e9),
		Throughput:      math.Round(tg.GFLOPs * scale * 1e9),
		PageCost:        res.PageCost,
	}
	p.Description = fmt.Sprintf("measured on %s/%s, %d CPUs, %s", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), res.Measured.Format("2006-01-02"))
	return p
}

// streamedSlowdown is how much more CPU a token takes with its experts
// served by the store than resident (at least 1): the compute rates of
// the profile are the streamed path's, which a device running the ladder's
// modes pays (the store's bookkeeping around each expert, experts
// computed from its buffers); the twin check measured the twin's compute
// 16-23% below direct storage's with the resident rates.
func streamedSlowdown(res *Result) float64 {
	if res.StreamedCPUTPS <= 0 || res.DecodeCPUTPS <= 0 {
		return 1
	}
	return max(res.DecodeCPUTPS/res.StreamedCPUTPS, 1)
}

// computeScale turns the reference decode's wall-clock rates into the
// host's rates when it has the CPU: tokens per CPU-second (times the
// threads, each given a CPU) over tokens per second. A loaded host's wall
// clock measures its load: at load 21 on this 2-vCPU VM a decode got a
// tenth of a CPU (4.5 tok/s, 49 tok per CPU-second), and a profile taken
// from it predicted compute 3× slower than the ladder measured minutes
// later. Without a CPU figure, or when the wall clock is faster (threads
// that did not scale), the wall-clock rates stand.
func computeScale(cfg Config, tg *bench.Row) float64 {
	if tg.CPUTPS <= 0 || tg.TPS <= 0 {
		return 1
	}
	return max(tg.CPUTPS*float64(max(cfg.Threads, 1))/tg.TPS, 1)
}
