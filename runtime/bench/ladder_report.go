package bench

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"

	"github.com/lesfarm/lesfarm/runtime/units"
)

// Write writes the ladder in format md, csv, json (one object, the shape of
// issue 4) or jsonl (one object per mode, then one for the oracle).
func (r *LadderReport) Write(w io.Writer, format string) error {
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	case "jsonl":
		enc := json.NewEncoder(w)
		type line struct {
			Model       string `json:"model"`
			Profile     string `json:"profile"`
			BudgetBytes int64  `json:"budget_bytes"`
			LadderRow
		}
		for _, row := range r.Rows {
			if err := enc.Encode(line{r.Model, r.Profile, r.BudgetBytes, row}); err != nil {
				return err
			}
		}
		if r.Oracle != nil {
			return enc.Encode(struct {
				Model       string `json:"model"`
				Profile     string `json:"profile"`
				BudgetBytes int64  `json:"budget_bytes"`
				Mode        string `json:"mode"`
				*LadderOracle
			}{r.Model, r.Profile, r.BudgetBytes, "oracle", r.Oracle})
		}
		return nil
	case "csv":
		cw := csv.NewWriter(w)
		head := []string{"model", "profile", "budget_bytes", "mode", "decode_tokens_per_second", "stddev", "speedup_vs_on_demand", "speedup_vs_on_demand_parallel", "hit_rate", "predictor_precision", "predictor_recall", "stall_fraction", "bytes_read_per_token", "bytes_vs_oracle", "oracle_fraction", "peak_rss_bytes", "identical_output", "speedup_vs_naive", "speedup_vs_previous", "time_base", "dilation", "host_compute_ms_per_token", "device_compute_ms_per_token",
			"spec_drafter", "spec_acceptance_rate", "spec_mean_accepted", "spec_tokens_per_target_pass", "spec_verify_us", "spec_experts_per_verify", "spec_off_share",
			"cv", "repetitions", "discarded_repetitions"}
		mixed := r.mixedRow() != nil
		if mixed {
			head = append(head, mixedCSVHead...)
		}
		cw.Write(head)
		f := func(x float64) string { return strconv.FormatFloat(x, 'g', 6, 64) }
		b := strconv.FormatInt(r.BudgetBytes, 10)
		for _, row := range r.Rows {
			rec := []string{r.Model, r.Profile, b, row.Mode, f(row.DecodeTokensPerSecond), f(row.Stddev), f(row.SpeedupVsOnDemand), f(row.SpeedupVsOnDemandParallel), f(row.HitRate), f(row.PredictorPrecision), f(row.PredictorRecall), f(row.StallFraction), f(row.BytesReadPerToken), f(row.BytesVsOracle), f(row.OracleFraction), strconv.FormatInt(row.PeakRSSBytes, 10), identical(row),
				f(row.SpeedupVsNaive), f(row.SpeedupVsPrevious), r.timeBase(), f(row.Dilation), f(row.HostComputeMSPerToken), f(row.DeviceComputeMSPerToken)}
			if sp := row.Speculative; sp != nil {
				rec = append(rec, sp.Drafter, f(sp.AcceptanceRate), f(sp.MeanAccepted), f(sp.TokensPerTargetPass), f(sp.VerifyUS), f(sp.ExpertsPerVerify), f(sp.OffShare))
			} else {
				rec = append(rec, "", "", "", "", "", "", "")
			}
			rec = append(rec, noiseCSV(row.Noise)...)
			if mixed {
				rec = append(rec, mixedCSV(row)...)
			}
			cw.Write(rec)
		}
		if o := r.Oracle; o != nil {
			rec := []string{r.Model, r.Profile, b, "oracle", f(o.DecodeTokensPerSecond), f(o.Stddev), "", "", f(o.HitRate), "", "", "", f(o.BytesReadPerToken), "1", "1", strconv.FormatInt(o.PeakRSSBytes, 10), strconv.FormatBool(o.IdenticalOutput),
				f(o.SpeedupVsNaive), "", r.timeBase(), f(o.Dilation), f(o.HostComputeMSPerToken), f(o.DeviceComputeMSPerToken), "", "", "", "", "", "", ""}
			rec = append(rec, noiseCSV(o.Noise)...)
			if mixed {
				rec = append(rec, make([]string, len(mixedCSVHead))...)
			}
			cw.Write(rec)
		}
		cw.Flush()
		return cw.Error()
	case "md", "":
		routing := ""
		if r.Routing != "" {
			routing = ", " + r.Routing + " routing (synthetic)"
		}
		fmt.Fprintf(w, "LES ladder: %s%s, storage %s, expert budget %s (%.1f%% of %s experts), %d thread(s), %s time\n\n", r.Model, routing, r.Profile, units.HumanSize(r.BudgetBytes), 100*float64(r.BudgetBytes)/float64(max(r.ExpertBytes, 1)), units.HumanSize(r.ExpertBytes), r.Threads, r.timeBase())
		if m := r.RoutingStats; m != nil {
			fmt.Fprintf(w, "Routing (routing-stats, %d tokens): lookahead recall %.3f, reuse %.3f, reuse@8 %.3f, verify×4 %.2f, top-10%% share %.3f, entropy %.3f\n\n",
				m.Tokens, m.Recall, m.Reuse, m.ReuseWindow, m.VerifyMultiple, m.Top10Share, m.Entropy)
		}
		fmt.Fprintln(w, "| mode | decode t/s | cv | n | × naive | × prev. row | × on-demand | × parallel | hit rate | pred. precision | pred. recall | stall | MB read/token | × oracle bytes | of oracle | peak RSS | identical |")
		fmt.Fprintln(w, "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | :---: |")
		for _, row := range r.Rows {
			mode := row.Mode
			if row.MixedRow != nil {
				mode = "+" + mode
			}
			fmt.Fprintf(w, "| %s | %.2f ± %.2f | %s | %s | %s | %s | %s | %s | %.3f | %s | %s | %.2f | %.1f | %s | %s | %s | %s |\n",
				mode, row.DecodeTokensPerSecond, row.Stddev, cvCell(row.CV), nCell(row.Noise), times(row.SpeedupVsNaive), times(row.SpeedupVsPrevious), times(row.SpeedupVsOnDemand), times(row.SpeedupVsOnDemandParallel), row.HitRate,
				dash(row.PredictorPrecision), dash(row.PredictorRecall), row.StallFraction, row.BytesReadPerToken/1e6, times(row.BytesVsOracle), pct(row.OracleFraction), rss(row.PeakRSSBytes), identical(row))
		}
		if o := r.Oracle; o != nil {
			prev := ""
			if n := len(r.Rows); n > 0 && r.Rows[n-1].DecodeTokensPerSecond > 0 {
				prev = times(o.DecodeTokensPerSecond / r.Rows[n-1].DecodeTokensPerSecond)
			}
			fmt.Fprintf(w, "| oracle (Belady + perfect prefetch) | %.2f ± %.2f | %s | %s | %s | %s | | | %.3f | | | | %.1f | 1.00× | 100%% | %s | %v |\n", o.DecodeTokensPerSecond, o.Stddev, cvCell(o.CV), nCell(o.Noise), times(o.SpeedupVsNaive), prev, o.HitRate, o.BytesReadPerToken/1e6, rss(o.PeakRSSBytes), o.IdenticalOutput)
		}
		if r.TimeBase == "device" && len(r.Rows) > 0 {
			fmt.Fprintln(w, "\nDevice time: the emulated flash ran on a clock dilated by the host's compute time over the device's.")
			for _, row := range r.Rows {
				fmt.Fprintf(w, "- %s: dilation %.2f, compute %.2f ms/token on the host, %.2f ms/token on the device\n", row.Mode, row.Dilation, row.HostComputeMSPerToken, row.DeviceComputeMSPerToken)
			}
		}
		if x := r.mixedRow(); x != nil {
			writeMixedNote(w, x)
		}
		for _, row := range r.Rows {
			if sp := row.Speculative; sp != nil {
				k := fmt.Sprintf("k = %d", sp.K)
				if sp.Adaptive {
					k = fmt.Sprintf("adaptive k ≤ %d", sp.K)
				}
				cut := "every draft verified"
				if sp.CutVerify {
					cut = fmt.Sprintf("drafts cut before new reads %.0f%%", 100*sp.CutShare)
				}
				fmt.Fprintf(w, "\n%s: drafter %s, %s; acceptance %.3f, mean accepted %.2f, %.2f tokens per target pass, verify %.0f µs, %.1f experts per verify pass, plain rounds %.0f%%, %s; paired speedup over the row before %.2f× (per repetition %.2f–%.2f×).\n",
					row.Mode, sp.Drafter, k, sp.AcceptanceRate, sp.MeanAccepted, sp.TokensPerTargetPass, sp.VerifyUS, sp.ExpertsPerVerify, 100*sp.OffShare, cut, sp.PairedSpeedup, sp.PairedMin, sp.PairedMax)
			}
		}
		if r.ReferenceSource != "" {
			fmt.Fprintf(w, "\nExactness reference: %s tokens; \"identical\" compares every rung's tokens with them.\n", r.ReferenceSource)
		}
		if r.ResidentRSS > 0 {
			fmt.Fprintf(w, "\nAll-resident reference: peak RSS %s (resident weights %s + experts %s).\n", units.HumanSize(r.ResidentRSS), units.HumanSize(r.ResidentBytes), units.HumanSize(r.ExpertBytes))
		}
		return nil
	}
	return fmt.Errorf("bench: unknown format %q", format)
}

// noiseCSV are a row's cv, repetitions and discarded_repetitions cells.
func noiseCSV(n Noise) []string {
	return []string{strconv.FormatFloat(n.CV, 'g', 6, 64), strconv.Itoa(n.Repetitions), strconv.Itoa(n.Discarded)}
}

func cvCell(cv float64) string { return strconv.FormatFloat(100*cv, 'f', 1, 64) + "%" }

// nCell is the repetition count, with the outliers dropped: "5 (−1)".
func nCell(n Noise) string {
	if n.Discarded > 0 {
		return fmt.Sprintf("%d (−%d)", n.Repetitions, n.Discarded)
	}
	return strconv.Itoa(n.Repetitions)
}

func (r *LadderReport) timeBase() string {
	if r.TimeBase == "" {
		return "host"
	}
	return r.TimeBase
}

// identical is the identical_output cell: "n/a" for the mixed row.
func identical(row LadderRow) string {
	if row.MixedRow != nil {
		return "n/a"
	}
	return strconv.FormatBool(row.IdenticalOutput)
}

var mixedCSVHead = []string{"speedup_vs_scheduled", "mixed_model_bytes", "reference_model_bytes", "plan_budget_bytes", "perplexity", "reference_perplexity", "identical_output_applies"}

func mixedCSV(row LadderRow) []string {
	x := row.MixedRow
	if x == nil {
		return make([]string, len(mixedCSVHead))
	}
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', 6, 64) }
	return []string{f(x.SpeedupVsScheduled), strconv.FormatInt(x.MixedModelBytes, 10), strconv.FormatInt(x.ReferenceModelBytes, 10), strconv.FormatInt(x.PlanBudgetBytes, 10), f(x.Perplexity), f(x.ReferencePerplexity), "false"}
}

func (r *LadderReport) mixedRow() *MixedRow {
	for _, row := range r.Rows {
		if row.MixedRow != nil {
			return row.MixedRow
		}
	}
	return nil
}

func writeMixedNote(w io.Writer, x *MixedRow) {
	fmt.Fprintf(w, "\n+mixed-precision: %s (%s, %.1f%% of the reference's %s; planner budget %s; experts %s), scheduled mode, same expert budget and storage: %.2f× scheduled.",
		x.MixedModel, units.HumanSize(x.MixedModelBytes), 100*float64(x.MixedModelBytes)/float64(max(x.ReferenceModelBytes, 1)), units.HumanSize(x.ReferenceModelBytes), units.HumanSize(x.PlanBudgetBytes), units.HumanSize(x.ExpertBytes), x.SpeedupVsScheduled)
	if x.ReferencePerplexity > 0 {
		fmt.Fprintf(w, " Perplexity %.4f vs reference %.4f (%+.2f%%; %s).", x.Perplexity, x.ReferencePerplexity, 100*(x.Perplexity/x.ReferencePerplexity-1), x.PerplexityMethod)
	}
	fmt.Fprintf(w, " %s.\n", MixedNote)
}

func rss(n int64) string {
	if n == 0 {
		return "–"
	}
	return units.HumanSize(n)
}

func dash(x float64) string {
	if x == 0 {
		return "–"
	}
	return strconv.FormatFloat(x, 'f', 3, 64)
}

func times(x float64) string {
	if x == 0 {
		return "–"
	}
	return strconv.FormatFloat(x, 'f', 2, 64) + "×"
}

func pct(x float64) string {
	if x == 0 {
		return "–"
	}
	return strconv.FormatFloat(100*x, 'f', 0, 64) + "%"
}
