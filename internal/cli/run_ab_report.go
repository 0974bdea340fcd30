package cli

import (
	"fmt"
	"strings"
)

// abJUnitCases are the A/B verdict as JUnit cases: one per device ×
// config × metric (failing on a regression), and one failing case when
// the comparison failed.
func (rep *runReport) abJUnitCases() []junitCase {
	ab := rep.AB
	if ab == nil {
		return nil
	}
	var out []junitCase
	if ab.Verdict == "failed" {
		out = append(out, junitCase{Name: fmt.Sprintf("A/B %s vs %s", ab.Build, ab.Baseline), Classname: rep.Suite + ".ab",
			Failure: &junitFailure{Message: ab.Summary, Type: "build", Text: strings.Join(ab.Problems, "\n")}})
	}
	for _, d := range ab.Decisions {
		c := junitCase{Name: fmt.Sprintf("%s %s", d.ConfigKey, d.Metric), Classname: fmt.Sprintf("%s.ab.%s", rep.Suite, d.DeviceID),
			Output: abDecisionLine(d) + "; " + d.Reason}
		if d.Outcome == "regression" {
			c.Failure = &junitFailure{Message: fmt.Sprintf("%s %+.1f%% [%+.1f%%, %+.1f%%] vs %s", d.Metric, 100*d.Change, 100*d.Low, 100*d.High, ab.Baseline),
				Type: "ab-regression", Text: abDecisionLine(d)}
		}
		out = append(out, c)
	}
	return out
}

// writeABSummary writes the A/B section of the markdown summary: the
// verdict and a table of every comparison.
func (rep *runReport) writeABSummary(b *strings.Builder) {
	ab := rep.AB
	if ab == nil {
		return
	}
	fmt.Fprintf(b, "\n### A/B: `%s` vs baseline `%s`\n\n", ab.Build, ab.Baseline)
	fmt.Fprintf(b, "Verdict **%s** after %d round(s) (up to %d; minimum effect %.1f%%): %s\n", ab.Verdict, ab.Rounds, ab.MaxRounds, 100*ab.MinEffect, ab.Summary)
	for _, p := range ab.Problems {
		fmt.Fprintf(b, "\n- %s", p)
	}
	if len(ab.Problems) > 0 {
		b.WriteString("\n")
	}
	if len(ab.Decisions) == 0 {
		return
	}
	b.WriteString("\n| device | config | metric | baseline | build | change | interval | p | runs | outcome |\n|---|---|---|---:|---:|---:|---|---:|---:|---|\n")
	for _, d := range ab.Decisions {
		mark := d.Outcome
		if d.Outcome == "regression" {
			mark = "❌ regression"
		}
		fmt.Fprintf(b, "| %s | %s | %s | %.4g | %.4g | %+.1f%% | [%+.1f%%, %+.1f%%] | %.2g | %d+%d | %s |\n",
			d.DeviceID, d.ConfigKey, d.Metric, d.MeanA, d.MeanB, 100*d.Change, 100*d.Low, 100*d.High, d.P, d.NA, d.NB, mark)
	}
}
