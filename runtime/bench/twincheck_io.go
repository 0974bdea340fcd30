package bench

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/lesfarm/lesfarm/runtime/expert"
	"github.com/lesfarm/lesfarm/runtime/les"
)

// TwinIOCell is one cell of direct storage's read histogram in a twin
// check (expert.IOHist over the decodes): reads of one size class at one
// queue depth, what they took on the disk, and what the twin's measured
// table says they take.
type TwinIOCell struct {
	SizeClass     int64   `json:"size_class"` // upper bound of the class, bytes
	MeanBytes     float64 `json:"mean_bytes"`
	Depth         int     `json:"depth"` // rounded mean depth
	MeanDepth     float64 `json:"mean_depth"`
	ReadsPerToken float64 `json:"reads_per_token"`
	MeanUS        float64 `json:"mean_us"` // measured service time per read
	// TableUS is the profile's table at the cell's mean size and depth
	// (expert.ServiceTimes.ReadTime), with a calibration each
	// repetition's table at its reads; 0 without a table.
	TableUS float64 `json:"table_us,omitempty"`
}

// twinIO returns the read histogram of reps' decodes as cells, largest
// share of the read time first, each priced by the table of its
// repetition (tables[i] for reps[i]; nil: no price).
func twinIO(reps []les.Rep, tables []*expert.ServiceTimes) []TwinIOCell {
	var hist expert.IOHist
	var tokens float64
	priced := map[[2]int]float64{} // Σ reads × table time, µs
	for i, r := range reps {
		hist.Add(r.Expert.IO)
		tokens += float64(r.DecodeTokens)
		if i >= len(tables) || tables[i] == nil {
			continue
		}
		for c := range r.Expert.IO.Cells {
			for q, x := range r.Expert.IO.Cells[c] {
				if x.Reads > 0 {
					t := tables[i].ReadTime(x.Bytes/x.Reads, x.DepthSum/float64(x.Reads))
					priced[[2]int{c, q}] += float64(x.Reads) * float64(t) / float64(time.Microsecond)
				}
			}
		}
	}
	tokens = max(tokens, 1)
	h := &hist
	var out []TwinIOCell
	for c := range h.Cells {
		for q, x := range h.Cells[c] {
			if x.Reads == 0 {
				continue
			}
			cell := TwinIOCell{SizeClass: expert.IOClassBytes(c), MeanBytes: float64(x.Bytes) / float64(x.Reads), Depth: q + 1,
				MeanDepth: x.DepthSum / float64(x.Reads), ReadsPerToken: float64(x.Reads) / tokens, MeanUS: float64(x.Time.Microseconds()) / float64(x.Reads)}
			cell.TableUS = priced[[2]int{c, q}] / float64(x.Reads)
			out = append(out, cell)
		}
	}
	slices.SortStableFunc(out, func(a, b TwinIOCell) int {
		return int(float64(b.ReadsPerToken*b.MeanUS) - float64(a.ReadsPerToken*a.MeanUS))
	})
	return out
}

// writeIO writes each row's direct read histogram, the cells that hold
// 95% of its read time.
func (r *TwinReport) writeIO(b *strings.Builder) {
	b.WriteString("\nDirect storage's reads in decode, by size and queue depth (mean over each read's service), the cells holding 95% of the read time: reads per token, µs per read measured / the twin's table at that size and depth:\n\n| mode | cells |\n| --- | --- |\n")
	for _, row := range r.Rows {
		var total float64
		for _, c := range row.Direct.IO {
			total += float64(c.ReadsPerToken * c.MeanUS)
		}
		var parts []string
		var acc float64
		for _, c := range row.Direct.IO {
			if total > 0 && acc >= 0.95*total {
				break
			}
			acc += float64(c.ReadsPerToken * c.MeanUS)
			s := fmt.Sprintf("%s × QD %d: %.1f, %.0f", sizeLabel(c.MeanBytes), c.Depth, c.ReadsPerToken, c.MeanUS)
			if c.TableUS > 0 {
				s += fmt.Sprintf(" / %.0f", c.TableUS)
			}
			parts = append(parts, s)
		}
		fmt.Fprintf(b, "| %s | %s |\n", row.Mode, strings.Join(parts, "; "))
	}
}

func sizeLabel(n float64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.2f MiB", n/(1<<20))
	default:
		return fmt.Sprintf("%.0f KiB", n/(1<<10))
	}
}
