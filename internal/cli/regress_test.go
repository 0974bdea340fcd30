package cli_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRegressDetectCLI(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var b strings.Builder
	b.WriteString("series,seq,value,stddev,n\n")
	for i := 1; i <= 24; i++ {
		v := 100 + float64(i%3)
		if i > 20 {
			v = 90 + float64(i%3)
		}
		fmt.Fprintf(&b, "decode,%d,%g,0.5,5\nflat,%d,%g,,\n", i, v, i, 50+float64(i%2))
	}
	in := filepath.Join(dir, "in.csv")
	if err := os.WriteFile(in, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	// A regression exits 3 (CI fails the build), naming the series.
	code, out, errOut := run(t, "regress", "detect", "--input", in)
	if code != 3 || !strings.Contains(errOut, "regression found in 1 series: decode") {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rep struct {
		ChangePoints []struct {
			Series, Direction string
			Seq               int64
			RelativeChange    float64 `json:"relative_change"`
		} `json:"change_points"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || len(rep.ChangePoints) != 1 {
		t.Fatalf("output %s: %v", out, err)
	}
	if cp := rep.ChangePoints[0]; cp.Series != "decode" || cp.Seq != 21 || cp.Direction != "regression" || cp.RelativeChange > -0.08 {
		t.Fatalf("change point %+v", cp)
	}
	// Lower-is-better flips the direction; md renders a table.
	// Lower is better: the same drop is an improvement, exit 0.
	code, out, _ = run(t, "regress", "detect", "--input", in, "--metric", "ttft_ms", "--format", "md")
	if code != 0 || !strings.Contains(out, "| decode | 21 | after 20, by 21 | improvement |") {
		t.Fatalf("md (%d):\n%s", code, out)
	}
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"regress", "detect"}, 2, "--input"},
		{[]string{"regress", "detect", "--input", in, "--format", "xml"}, 2, "--format"},
		{[]string{"regress", "detect", "--input", in, "--metric", "frobs"}, 2, "unknown metric"},
		{[]string{"regress", "detect", "--input", in, "--alpha", "2"}, 2, "alpha"},
		{[]string{"regress", "detect", "--input", filepath.Join(dir, "missing.csv")}, 1, "no such file"},
		{[]string{"regress", "eval", "--setting", "nope"}, 2, "unknown setting"},
		{[]string{"regress", "eval", "--design", "n7"}, 2, "unknown design"},
		{[]string{"regress", "triage", "0", "--status", "fixed"}, 2, "positive integer"},
	} {
		code, _, errOut := run(t, tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.msg) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tc.args, code, errOut, tc.code, tc.msg)
		}
	}
}

func TestRegressEvalCLI(t *testing.T) {
	t.Parallel()
	code, out, errOut := run(t, "regress", "eval", "--histories", "5", "--setting", "pelt-default", "--noise", "gaussian",
		"--design", "n1", "--format", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var res struct {
		Cells     []map[string]any `json:"cells"`
		Summaries []map[string]any `json:"summaries"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || len(res.Cells) != 25 || len(res.Summaries) != 3 {
		t.Fatalf("eval json: %d cells, %d summaries, %v", len(res.Cells), len(res.Summaries), err)
	}
}

func TestRegressEvalSeriesCLI(t *testing.T) {
	t.Parallel()
	code, out, errOut := run(t, "regress", "eval", "--design", "series", "--histories", "3", "--siblings", "1", "--format", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var res []struct {
		Setting   string           `json:"setting"`
		Cells     []map[string]any `json:"cells"`
		Summaries []struct {
			Region        string  `json:"region"`
			SettledRecall float64 `json:"settled_recall"`
		} `json:"summaries"`
	}
	// 7 step families × 4 steps × 5 CVs + 8 null families × 5 CVs; the
	// goal region, the whole grid and one summary per family.
	if err := json.Unmarshal([]byte(out), &res); err != nil || len(res) != 1 || len(res[0].Cells) != 180 || len(res[0].Summaries) != 17 {
		t.Fatalf("eval series json %.300s: %v", out, err)
	}
	code, out, _ = run(t, "regress", "eval", "--design", "series", "--histories", "3", "--siblings", "2", "--sibling-spread", "0.3")
	if code != 0 || !strings.Contains(out, "settled recall") || !strings.Contains(out, "Each series has 2 sibling series (same family and builds, CV spread 0.3,") {
		t.Fatalf("md (%d):\n%s", code, out)
	}
	code, out, _ = run(t, "regress", "eval", "--design", "series", "--histories", "2", "--held-out", "--siblings", "-1")
	if code != 0 || !strings.Contains(out, "usual series 24–72 points") || !strings.Contains(out, "No sibling series") {
		t.Fatalf("held-out md (%d):\n%.600s", code, out)
	}
	if code, _, errOut := run(t, "regress", "eval", "--design", "series", "--design", "n1"); code != 2 || !strings.Contains(errOut, "alone") {
		t.Fatalf("series with n1: exit %d, %s", code, errOut)
	}
}
