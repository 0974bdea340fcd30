package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// TwinFormats are the formats TwinReport.Write supports.
var TwinFormats = []string{"md", "json"}

// Write writes the twin check as md (one table of tok/s and one of the
// parts per token) or json.
func (r *TwinReport) Write(w io.Writer, format string) error {
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	case "md", "":
	default:
		return fmt.Errorf("bench: the twin check writes %s, not %q", strings.Join(TwinFormats, " or "), format)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Twin check: %s, direct storage against the twin %s (%s time), budget %d bytes, %d interleaved repetitions", r.Model, r.Twin, r.TimeBase, r.BudgetBytes, r.Repetitions)
	if len(r.Load) > 0 {
		fmt.Fprintf(&b, ", load average %s", strings.Join(r.Load, " → "))
	}
	b.WriteString("\n\n| mode | direct tok/s | twin tok/s | error | flash-only error | identical |\n| --- | ---: | ---: | ---: | ---: | --- |\n")
	for _, row := range r.Rows {
		fmt.Fprintf(&b, "| %s | %.2f (cv %.2f) | %.2f (cv %.2f) | %+.1f%% | %+.1f%% | %v / %v |\n", row.Mode, row.Direct.DecodeTokensPerSecond, row.Direct.CV,
			row.Twin.DecodeTokensPerSecond, row.Twin.CV, 100*row.Error, 100*row.FlashOnlyError, row.Direct.IdenticalOutput, row.Twin.IdenticalOutput)
	}
	fmt.Fprintf(&b, "\n%d of %d rows within ±%.0f%%.\n\nPer token, direct / twin:\n\n| mode | MB read | reads | stall ms | compute ms | CPU ms | twin host compute ms | stall error | compute error | compute error (CPU) |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n", r.Within(), len(r.Rows), 100*r.Limit)
	for _, row := range r.Rows {
		d, t := &row.Direct, &row.Twin
		fmt.Fprintf(&b, "| %s | %.2f / %.2f | %.1f / %.1f | %.1f / %.1f | %.1f / %.1f | %.1f / %.1f | %.1f | %+.1f%% | %+.1f%% | %+.1f%% |\n", row.Mode, d.BytesReadPerToken/1e6, t.BytesReadPerToken/1e6,
			d.ReadsPerToken, t.ReadsPerToken, d.StallMSPerToken, t.StallMSPerToken, d.ComputeMSPerToken, t.ComputeMSPerToken, d.CPUMSPerToken, t.CPUMSPerToken, t.HostComputeMSPerToken, 100*row.StallError, 100*row.ComputeError, 100*row.ComputeCPUError)
	}
	r.writeIO(&b)
	r.writeCalibration(&b)
	_, err := io.WriteString(w, b.String())
	return err
}
