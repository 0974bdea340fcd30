package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/lesfarm/lesfarm/coordinator/api/client"
)

// runReport is what 'lesfarm run --wait' found: every run of the trigger
// with its results, the previous build's results on the same device and
// lineage, and the regression alerts of the build. It is the --format json
// output and the source of --junit and --summary.
type runReport struct {
	Trigger int64               `json:"trigger"`
	Suite   string              `json:"suite"`
	Build   string              `json:"build"`
	Lineage string              `json:"lineage"`
	Runs    []reportRun         `json:"runs"`
	Alerts  []client.AlertGroup `json:"alerts"`
	// LineageAlerts are regression alerts raised while the command waited
	// on other builds of the lineage (the detector places a change at the
	// build where it happened, often an earlier one). Reported, not failed on.
	LineageAlerts []client.AlertGroup `json:"lineage_alerts,omitempty"`
	// AB is the A/B comparison and its verdict (run --baseline).
	AB       *client.AB `json:"ab,omitempty"`
	Problems []string   `json:"problems,omitempty"`
	OK       bool       `json:"ok"`
}

// write writes the report's requested outputs: JUnit and the summary to
// their files, the JSON to standard output.
func (rep *runReport) write(env *Env, junitPath, summaryPath string, jsonOut bool) error {
	if junitPath != "" {
		if err := writeReportFile(junitPath, env.Stdout, rep.writeJUnit); err != nil {
			return fmt.Errorf("run: --junit: %w", err)
		}
	}
	if summaryPath != "" {
		if err := writeReportFile(summaryPath, env.Stdout, rep.writeSummary); err != nil {
			return fmt.Errorf("run: --summary: %w", err)
		}
	}
	if jsonOut {
		return rep.writeJSON(env.Stdout)
	}
	return nil
}

// reportRun is one run of the trigger.
type reportRun struct {
	ID       int64           `json:"id"`
	Device   string          `json:"device"`
	State    string          `json:"state"`
	Error    string          `json:"error,omitempty"`
	Results  []client.Result `json:"results"`
	Previous *previousRun    `json:"previous,omitempty"`
}

// previousRun is the newest earlier succeeded run of the same suite on
// the same device and lineage, from another build.
type previousRun struct {
	ID      int64           `json:"id"`
	Build   string          `json:"build"`
	Results []client.Result `json:"results"`
}

// collectReport reads the runs' details and previous builds' results.
func collectReport(ctx context.Context, c *client.Client, rep *runReport, runIDs []int64) error {
	for _, id := range runIDs {
		d, err := c.GetRun(ctx, id)
		if err != nil {
			return err
		}
		rr := reportRun{ID: id, Device: d.DeviceID, State: d.State, Error: d.Error, Results: d.Results}
		if d.DeviceID != "" {
			prev, err := c.ListRuns(ctx, client.RunFilter{Suite: rep.Suite, Lineage: rep.Lineage, DeviceID: d.DeviceID, State: "succeeded", Limit: 50})
			if err != nil {
				return err
			}
			for _, p := range prev { // newest first
				if p.ID < id && p.Build != rep.Build {
					pd, err := c.GetRun(ctx, p.ID)
					if err != nil {
						return err
					}
					rr.Previous = &previousRun{ID: p.ID, Build: p.Build, Results: pd.Results}
					break
				}
			}
		}
		rep.Runs = append(rep.Runs, rr)
	}
	return nil
}

// writeReportFile writes one output of the report to path ("-": stdout).
func writeReportFile(path string, stdout io.Writer, write func(io.Writer) error) error {
	if path == "-" {
		return write(stdout)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func (rep *runReport) writeJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// JUnit XML, the subset CI systems read.
type junitSuites struct {
	XMLName xml.Name     `xml:"testsuites"`
	Suites  []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name     string      `xml:"name,attr"`
	Tests    int         `xml:"tests,attr"`
	Failures int         `xml:"failures,attr"`
	Cases    []junitCase `xml:"testcase"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	Classname string        `xml:"classname,attr"`
	Failure   *junitFailure `xml:"failure,omitempty"`
	Output    string        `xml:"system-out,omitempty"`
}

type junitFailure struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr"`
	Text    string `xml:",chardata"`
}

// writeJUnit writes one test case per run × config (a failure when the
// run did not succeed or the config's result is invalid; a run without
// results is one case, failing unless it succeeded) and one failing case per regression alert.
func (rep *runReport) writeJUnit(w io.Writer) error {
	s := junitSuite{Name: fmt.Sprintf("lesfarm %s %s (%s)", rep.Suite, rep.Build, rep.Lineage)}
	add := func(c junitCase) {
		s.Cases = append(s.Cases, c)
		s.Tests++
		if c.Failure != nil {
			s.Failures++
		}
	}
	for _, r := range rep.Runs {
		class := fmt.Sprintf("%s.%s", rep.Suite, cmp.Or(r.Device, "unassigned"))
		runFail := func() *junitFailure {
			if r.State == "succeeded" {
				return nil
			}
			return &junitFailure{Message: fmt.Sprintf("run %d %s", r.ID, r.State), Type: "run", Text: r.Error}
		}
		if len(r.Results) == 0 {
			add(junitCase{Name: fmt.Sprintf("run %d", r.ID), Classname: class, Failure: runFail()})
			continue
		}
		for _, res := range r.Results {
			c := junitCase{Name: res.ConfigKey, Classname: class, Failure: runFail(),
				Output: fmt.Sprintf("decode %.2f ± %.2f tok/s, TTFT %.1f ms, hit rate %.3f, stall %.3f", res.DecodeTPS.Mean, res.DecodeTPS.Stddev, res.TTFTms.Mean, res.HitRate, res.StallFraction)}
			if c.Failure == nil && !res.Valid {
				c.Failure = &junitFailure{Message: "invalid result: " + res.InvalidReason, Type: "result", Text: res.Error}
			}
			add(c)
		}
	}
	for _, a := range rep.Alerts {
		add(junitCase{Name: fmt.Sprintf("regression alert %d", a.ID), Classname: rep.Suite + ".regressions",
			Failure: &junitFailure{Message: a.Summary, Type: "regression", Text: fmt.Sprintf("scope %s, status %s", a.Scope, a.Status)}})
	}
	for _, a := range rep.LineageAlerts {
		add(junitCase{Name: fmt.Sprintf("regression alert %d on build %s", a.ID, a.Build), Classname: rep.Suite + ".lineage",
			Output: fmt.Sprintf("%s (scope %s, status %s)", a.Summary, a.Scope, a.Status)})
	}
	for _, c := range rep.abJUnitCases() { // run_ab_report.go
		add(c)
	}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(junitSuites{Suites: []junitSuite{s}}); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}

// writeSummary writes a markdown summary for a pull-request comment: the
// ladder per device with the change against the previous build of the
// lineage on that device, then the regression alerts.
func (rep *runReport) writeSummary(w io.Writer) error {
	var b strings.Builder
	verdict := "✅ all runs succeeded, no regression alert"
	if rep.AB != nil {
		verdict = "✅ A/B: " + rep.AB.Summary
	}
	if !rep.OK {
		verdict = "❌ " + strings.Join(rep.Problems, "; ")
	}
	fmt.Fprintf(&b, "## lesfarm: %s on build `%s` (lineage %s)\n\n%s\n", rep.Suite, rep.Build, rep.Lineage, verdict)
	runs := slices.Clone(rep.Runs)
	slices.SortStableFunc(runs, func(a, b reportRun) int { return strings.Compare(a.Device, b.Device) })
	for _, r := range runs {
		fmt.Fprintf(&b, "\n### %s (run %d, %s)\n\n", cmp.Or(r.Device, "unassigned"), r.ID, r.State)
		if r.Error != "" {
			fmt.Fprintf(&b, "Error: %s\n\n", r.Error)
		}
		if len(r.Results) == 0 {
			b.WriteString("No results.\n")
			continue
		}
		prev := map[string]client.Result{}
		against := "no earlier build on this device"
		if r.Previous != nil {
			against = fmt.Sprintf("vs `%s`", r.Previous.Build)
			for _, p := range r.Previous.Results {
				prev[p.ConfigKey] = p
			}
		}
		fmt.Fprintf(&b, "| config | decode tok/s | Δ %s | TTFT ms | hit rate | stall |\n|---|---:|---:|---:|---:|---:|\n", against)
		for _, res := range r.Results {
			delta := "—"
			if p, ok := prev[res.ConfigKey]; ok && p.DecodeTPS.Mean > 0 {
				delta = fmt.Sprintf("%+.1f%%", 100*(res.DecodeTPS.Mean/p.DecodeTPS.Mean-1))
			}
			val := fmt.Sprintf("%.2f ± %.2f", res.DecodeTPS.Mean, res.DecodeTPS.Stddev)
			if !res.Valid {
				val += " (invalid: " + res.InvalidReason + ")"
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %.1f | %.3f | %.3f |\n", res.ConfigKey, val, delta, res.TTFTms.Mean, res.HitRate, res.StallFraction)
		}
	}
	rep.writeABSummary(&b) // run_ab_report.go
	b.WriteString("\n### Regression alerts\n\n")
	if len(rep.Alerts) == 0 {
		b.WriteString("None.\n")
	}
	for _, a := range rep.Alerts {
		fmt.Fprintf(&b, "- **alert %d** (%s, %s): %s\n", a.ID, a.Scope, a.Status, a.Summary)
	}
	for _, a := range rep.LineageAlerts {
		fmt.Fprintf(&b, "- alert %d on earlier build `%s` of the lineage (%s, %s): %s\n", a.ID, a.Build, a.Scope, a.Status, a.Summary)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
