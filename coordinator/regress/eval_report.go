package regress

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
)

// WriteMarkdown writes the summaries and, per setting and noise kind, a
// step × CV matrix of recall with 2, 4 and After runs after the step,
// mean delay and false alerts.
func (r *EvalResult) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# Regression detector evaluation\n\n%d histories per cell, seed %d, %d–%d runs before the step, %d after; a hit is an alert of the right direction raised after the step and located within %d runs of it (alerts are refined in place when a change point moves by up to %d runs). Null cells (no step) count toward false alerts once per step cell.\n\n",
		r.Histories, r.Seed, r.Config.PreMin, r.Config.PreMax, r.After, r.Config.Tolerance, r.Config.MergeWindow)
	b.WriteString("Designs (what \"CV\" means):\n\n")
	for _, d := range r.Designs {
		if d.Reps <= 1 {
			fmt.Fprintf(&b, "- `%s`: one repetition per result; CV is the CV of a result.\n", d.Name)
			continue
		}
		basis := "of a result (the mean of the repetitions)"
		if d.CVPerRep {
			rc, _, _ := d.resultCV(1)
			basis = fmt.Sprintf("of a single repetition; a result's CV is %.2f·CV", rc)
		}
		fmt.Fprintf(&b, "- `%s`: %d repetitions per result, %.0f%% of a repetition's variance run-to-run; CV is the CV %s.\n", d.Name, d.Reps, 100*d.BetweenShare, basis)
	}
	b.WriteString("\n## Summary\n\n| setting | design | region | recall@2 | recall@4 | recall@" + fmt.Sprint(r.After) + " | mean delay | false alerts / alerts | false alerts per 100 null histories |\n|---|---|---|---:|---:|---:|---:|---:|---:|\n")
	for _, s := range r.Summaries {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %.2f | %s (%d/%d) | %.1f |\n", s.Setting, s.Design, s.Region,
			pct(s.RecallAt2), pct(s.RecallAt4), pct(s.Recall), s.MeanDelay, pct(s.FalseAlertShare), s.FalseAlerts, s.TrueAlerts+s.FalseAlerts, s.NullFalsePer100)
	}
	idx := map[string]Cell{}
	for _, c := range r.Cells {
		idx[fmt.Sprintf("%s/%s/%s/%g/%g", c.Setting, c.Design, c.Noise, c.Step, c.CV)] = c
	}
	for _, set := range r.Settings {
		for _, d := range r.Designs {
			fmt.Fprintf(&b, "\n## Grid: %s, design %s\n\nEach cell: recall@2 / recall@4 / recall@%d, mean delay in runs; the step-0 row gives false alerts per 100 null histories.\n", set.Name, d.Name, r.After)
			for _, nz := range r.Config.Noises {
				fmt.Fprintf(&b, "\n**%s**\n\n| step |", nz)
				for _, cv := range r.Config.CVs {
					fmt.Fprintf(&b, " CV %g%% |", 100*cv)
				}
				b.WriteString("\n|---|" + strings.Repeat("---|", len(r.Config.CVs)) + "\n")
				for _, step := range append([]float64{0}, r.Config.Steps...) {
					fmt.Fprintf(&b, "| %g%% |", 100*step)
					for _, cv := range r.Config.CVs {
						c := idx[fmt.Sprintf("%s/%s/%s/%g/%g", set.Name, d.Name, nz, step, cv)]
						if step == 0 {
							fmt.Fprintf(&b, " %.1f false |", 100*ratio(c.FalseAlerts, c.Histories))
							continue
						}
						fmt.Fprintf(&b, " %s/%s/%s, %.1f |", pct0(c.Recall(c.HitsAt2)), pct0(c.Recall(c.HitsAt4)), pct0(c.Recall(c.Hits)), c.MeanDelay())
					}
					b.WriteString("\n")
				}
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func pct(x float64) string {
	if math.IsNaN(x) {
		return "n/a"
	}
	return fmt.Sprintf("%.1f%%", 100*x)
}

func pct0(x float64) string {
	if math.IsNaN(x) {
		return "n/a"
	}
	return fmt.Sprintf("%.0f", 100*x)
}

// SortCells orders cells by setting, noise, step and CV (for stable JSON).
func (r *EvalResult) SortCells() {
	order := map[string]int{}
	for i, s := range r.Settings {
		order[s.Name] = i
	}
	slices.SortStableFunc(r.Cells, func(a, b Cell) int {
		return cmp.Or(cmp.Compare(order[a.Setting], order[b.Setting]), strings.Compare(a.Design, b.Design), strings.Compare(string(a.Noise), string(b.Noise)),
			cmp.Compare(a.Step, b.Step), cmp.Compare(a.CV, b.CV))
	})
}
