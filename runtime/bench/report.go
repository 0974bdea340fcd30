package bench

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/lesfarm/lesfarm/runtime/units"
)

// Formats are the report formats Write accepts.
var Formats = []string{"md", "csv", "json", "jsonl"}

// Write writes the report in format: "md" (a llama-bench-style Markdown
// table), "csv" (one header line, one line per row), "json" (one object)
// or "jsonl" (one row object per line).
func (r *Report) Write(w io.Writer, format string) error {
	switch format {
	case "md", "":
		return r.writeMarkdown(w)
	case "csv":
		return r.writeCSV(w)
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	case "jsonl":
		enc := json.NewEncoder(w)
		for _, row := range r.Rows {
			if err := enc.Encode(row); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("bench: unknown format %q (use %s)", format, strings.Join(Formats, ", "))
}

func humanCount(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.2f B", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.2f M", float64(n)/1e6)
	}
	return fmt.Sprintf("%.2f K", float64(n)/1e3)
}

func (r *Report) writeMarkdown(w io.Writer) error {
	head := []string{"model", "size", "params", "backend", "threads", "test", "t/s", "cv", "n", "t/CPU-s", "GB/s", "GFLOP/s"}
	align := []string{"---", "---:", "---:", "---", "---:", "---:", "---:", "---:", "---:", "---:", "---:", "---:"}
	if r.CopyGBps > 0 {
		head = append(head, "of copy BW")
		align = append(align, "---:")
	}
	if r.CopyGBpsCPU > 0 {
		head = append(head, "GB/CPU-s", "of copy (CPU)")
		align = append(align, "---:", "---:")
	}
	var b strings.Builder
	b.WriteString("| " + strings.Join(head, " | ") + " |\n")
	b.WriteString("| " + strings.Join(align, " | ") + " |\n")
	for _, row := range r.Rows {
		cells := []string{
			fmt.Sprintf("%s %s", row.Arch, row.Type), units.HumanSize(row.SizeBytes), humanCount(row.Params), row.Backend,
			strconv.Itoa(row.Threads), row.Test, fmt.Sprintf("%.2f ± %.2f", row.TPS, row.TPSStddev), fmt.Sprintf("%.1f%%", 100*row.TPSCV), strconv.Itoa(row.Reps), fmt.Sprintf("%.2f", row.CPUTPS),
			fmt.Sprintf("%.2f", row.GBps), fmt.Sprintf("%.2f", row.GFLOPs),
		}
		if r.CopyGBps > 0 {
			cells = append(cells, fmt.Sprintf("%.0f%%", 100*row.BWFraction))
		}
		if r.CopyGBpsCPU > 0 {
			cells = append(cells, fmt.Sprintf("%.2f", row.GBpsCPU), fmt.Sprintf("%.0f%%", 100*row.BWFractionCPU))
		}
		b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
	}
	if r.CopyGBps > 0 {
		fmt.Fprintf(&b, "\nmemory copy: %.2f GB/s read, %.2f GB per CPU-second (large buffer copy, best of 5); GB/s = weight bytes read per token × t/s\n", r.CopyGBps, r.CopyGBpsCPU)
	}
	if len(r.Rows) > 0 {
		b.WriteString("t/CPU-s = tokens per CPU-second of the process (all threads): unaffected by other load on a shared machine\n")
	}
	if len(r.Rows) > 0 && r.Rows[0].RecurrentStateBytes > 0 {
		row := r.Rows[0]
		fmt.Fprintf(&b, "sequence state: %s (KV cache of the attention layers + recurrent state + rollback history), of which conv + DeltaNet state %s\n",
			units.HumanSize(row.StateBytes), units.HumanSize(row.RecurrentStateBytes))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func (r *Report) writeCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	cw.Write([]string{"model", "arch", "type", "size_bytes", "params", "backend", "threads", "test", "n_tokens", "repetitions",
		"tokens_per_second", "stddev", "tokens_per_cpu_second", "weight_gb_per_token", "gb_per_second", "gflop_per_second", "bandwidth_fraction",
		"gb_per_cpu_second", "bandwidth_fraction_cpu", "cv"})
	f := func(x float64) string { return strconv.FormatFloat(x, 'g', 6, 64) }
	for _, row := range r.Rows {
		cw.Write([]string{row.Model, row.Arch, row.Type, strconv.FormatInt(row.SizeBytes, 10), strconv.FormatInt(row.Params, 10),
			row.Backend, strconv.Itoa(row.Threads), row.Test, strconv.Itoa(row.Tokens), strconv.Itoa(row.Reps),
			f(row.TPS), f(row.TPSStddev), f(row.CPUTPS), f(row.WeightGB), f(row.GBps), f(row.GFLOPs), f(row.BWFraction),
			f(row.GBpsCPU), f(row.BWFractionCPU), f(row.TPSCV)})
	}
	cw.Flush()
	return cw.Error()
}
