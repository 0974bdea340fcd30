package calibrate

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/lesfarm/lesfarm/runtime/expert"
)

// YAML returns the measured profile as a profile file, with what was
// measured (the read grid, memory copy, reference decode) as comments.
func (r *Result) YAML() []byte {
	var h strings.Builder
	fmt.Fprintf(&h, "%s: measured by lesfarm profile measure on %s.\n", r.Profile.Name, r.Measured.Format("2006-01-02 15:04 UTC"))
	what := "a test file"
	if r.ReadFile != "" {
		what = r.ReadFile + " (read as it is)"
	}
	fmt.Fprintf(&h, "flash: reads of %s, O_DIRECT %v, each size by its pattern; MB/s (µs per read):\n", what, r.Direct)
	if r.PageFile != "" {
		fmt.Fprintf(&h, "  (the pages rows read %s)\n", r.PageFile)
	}
	h.WriteString("  random: one pread at a random 4KiB-aligned offset per read; layer: the store's expert reads, one layer's routed set of adjacent expert blobs\n")
	h.WriteString("  shared by the readers in flight, then the next layer's; pages: the naive mode's fault, one preadv of page-sized buffers.\n")
	var qds []int
	var blocks []int64
	for _, c := range r.Cells {
		if !containsInt(qds, c.QD) {
			qds = append(qds, c.QD)
		}
		if !containsInt64(blocks, c.Block) {
			blocks = append(blocks, c.Block)
		}
	}
	line := fmt.Sprintf("  %-15s", "block/QD")
	for _, q := range qds {
		line += fmt.Sprintf(" | %14d", q)
	}
	h.WriteString(line + "\n")
	for _, b := range blocks {
		pat := ""
		for _, c := range r.Cells {
			if c.Block == b {
				pat = c.Pattern
			}
		}
		line := fmt.Sprintf("  %-15s", sizeName(b)+" "+pat)
		for _, q := range qds {
			for _, c := range r.Cells {
				if c.Block == b && c.QD == q {
					line += fmt.Sprintf(" | %6.0f (%5.0f)", c.BytesPerS/1e6, float64(c.MeanLatency.Microseconds()))
				}
			}
		}
		h.WriteString(line + "\n")
	}
	fmt.Fprintf(&h, "bandwidth = the best cell; latency = QD 1 %s read less its transfer; max_in_flight = the smallest QD within 90%% of the best %s throughput.\n", sizeName(blocks[0]), sizeName(blocks[0]))
	h.WriteString("service_times is the grid's mean time per read; the emulated flash prices every read by it (latency and transfer per read size).\n")
	fmt.Fprintf(&h, "memory copy: %.2f GB/s.\n", r.CopyGBps)
	fmt.Fprintf(&h, "compute: decode of the reference model (%s): %.2f tok/s, %.2f tok per CPU-second, %.3f GB of weights per token;\n", r.RefModel, r.DecodeTPS, r.DecodeCPUTPS, r.WeightGBTok)
	h.WriteString("weight_bandwidth and throughput are that decode's weight bytes and FLOPs per CPU-second of each decode thread (its speed with the CPU to itself, not the host's load),\n")
	fmt.Fprintf(&h, "divided by %.3f: the same decode with its experts served by the store took %.2f tok per CPU-second against %.2f resident (the ladder's modes compute on that path).\n", streamedSlowdown(r), r.StreamedCPUTPS, r.DecodeCPUTPS)
	h.WriteString("page_cost is the naive mode's page-cache work per page read (evict, insert, look up; the fastest of 5 rounds), charged on the device clock as compute.\n")
	return expert.MarshalProfile(r.Profile, h.String())
}

// WriteFile writes data to path through a temporary file in the same
// directory and a rename, so path is either absent or complete.
func WriteFile(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-")
	if err != nil {
		return fmt.Errorf("calibrate: %w", err)
	}
	name := tmp.Name()
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		os.Remove(name)
		return fmt.Errorf("calibrate: writing %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		os.Remove(name)
		return fmt.Errorf("calibrate: writing %s: %w", path, err)
	}
	if err := os.Rename(name, path); err != nil {
		os.Remove(name)
		return fmt.Errorf("calibrate: %w", err)
	}
	return nil
}

func sizeName(b int64) string {
	switch {
	case b >= 1<<20 && b%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", b>>20)
	case b >= 1<<10 && b%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", b>>10)
	}
	return fmt.Sprintf("%dB", b)
}

func containsInt(xs []int, x int) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

func containsInt64(xs []int64, x int64) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
