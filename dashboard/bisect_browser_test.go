package dashboard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/lesfarm/lesfarm/coordinator/abtest"
	"github.com/lesfarm/lesfarm/coordinator/bisect"
	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/jobs"
)

// TestAlertBisectionPanel: an alert group without a bisection offers to
// start one (with the CLI command); one that ended on a culprit shows its
// builds (good, bad, skipped), each step with its samples per side,
// p-value and change with its interval, and the culprit with its short
// sha and the git log range; at 390 px the page stays within the screen.
func TestAlertBisectionPanel(t *testing.T) {
	f := newFarm(t)
	ctx := context.Background()
	_, gid := f.seed(t)
	b := newBrowser(t)
	b.open(t, f.url, fmt.Sprintf("/alerts/%d", gid))
	if got := b.text(t, "#bisection"); !strings.Contains(got, "Bisect") || !strings.Contains(got, fmt.Sprintf("lesfarm bisect %d --wait", gid)) {
		t.Fatalf("panel without a bisection: %q", got)
	}

	// A bisection of the group that ended on ci-4808, stored as the
	// coordinator stores one.
	g, err := f.st.GetAlertGroup(ctx, gid)
	if err != nil {
		t.Fatal(err)
	}
	var builds []bisect.Build
	for i := 4804; i <= 4808; i++ {
		builds = append(builds, bisect.Build{ID: fmt.Sprintf("ci-%d", i), GitSHA: sha(i), Position: int64(i)})
	}
	s, err := bisect.NewSearch(builds, -0.13, 4*time.Hour, abtest.Plan{})
	if err != nil {
		t.Fatal(err)
	}
	s.Skip(2, "no executable for android/arm64, the platform of s24-a")
	spec, err := jobs.Builtin("smoke")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(s)
	bs, err := f.st.CreateBisection(ctx, &store.CreateBisectionParams{GroupID: gid, AlertID: g.Alerts[0].ID, Suite: "les-ladder", Lineage: "main",
		Config: "lookahead/budget=25%", Metric: "decode_tps", Configs: []string{"lookahead/budget=25%"}, DeviceModel: "Galaxy S24",
		DeviceID: "s24-a", Spec: spec, Budget: 4 * time.Hour, Search: raw})
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range []struct {
		p      bisect.Pair
		change float64
		j      bisect.Judgement
	}{
		{bisect.Pair{A: 0, B: 4, Kind: bisect.KindVerify}, -0.131, bisect.Differs},
		{bisect.Pair{A: 0, B: 1, Kind: bisect.KindBisect}, 0.002, bisect.Matches},
		{bisect.Pair{A: 1, B: 3, Kind: bisect.KindBisect}, -0.004, bisect.Matches},
	} {
		p, _ := s.Next()
		if p != st.p {
			t.Fatalf("search asks for %+v, want %+v", p, st.p)
		}
		step, _, err := f.st.StartBisectionStep(ctx, &store.StartBisectionStepParams{Bisection: bs, Kind: p.Kind, AIndex: p.A, BIndex: p.B,
			BuildA: builds[p.A].ID, BuildB: builds[p.B].ID, DeviceID: "s24-a", MinEffect: 0.05, Rounds: 6, StepRounds: 6, MaxRounds: 30})
		if err != nil {
			t.Fatal(err)
		}
		c := abtest.Comparison{Verdict: abtest.Same, P: 0.41, NA: 6, NB: 6, Shift: abtest.Shift{Change: st.change, Low: st.change - 0.01, High: st.change + 0.01, Level: 0.95}}
		if st.j == bisect.Differs {
			c.Verdict, c.P = abtest.Different, 0.0022
		}
		s.Record(p, c, st.j)
		ev, _ := json.Marshal(map[string]any{"summary": fmt.Sprintf("%s %s: lookahead/budget=25%% decode_tps", builds[p.B].ID, st.j), "decisions": []map[string]any{{
			"device_id": "s24-a", "config_key": "lookahead/budget=25%", "metric": "decode_tps", "decides": true, "p": c.P,
			"change": st.change, "change_low": c.Shift.Low, "change_high": c.Shift.High, "n_a": 6, "n_b": 6, "mean_a": 31.5, "mean_b": 31.5 * (1 + st.change)}}})
		if err := f.st.FinishBisectionStep(ctx, bs.ID, step.Step, store.StepDone, string(st.j), "same", ev, ""); err != nil {
			t.Fatal(err)
		}
	}
	if s.State != bisect.StateCulprit {
		t.Fatalf("search ended %s (%s)", s.State, s.Reason)
	}
	raw, _ = json.Marshal(s)
	if err := f.st.UpdateBisection(ctx, &store.UpdateBisectionParams{ID: bs.ID, Search: raw, State: s.State, Reason: s.Reason, DeviceID: "s24-a",
		DeviceTime: 36 * time.Minute, Runs: 24, LastGoodBuild: "ci-4807", FirstBadBuild: "ci-4808"}); err != nil {
		t.Fatal(err)
	}

	b.open(t, f.url, fmt.Sprintf("/alerts/%d", gid))
	panel := b.text(t, "#bisection")
	for _, want := range []string{"Bisection #" + fmt.Sprint(bs.ID), "culprit", "Culprit: ci-4808", sha(4808)[:10],
		"last good ci-4807", "git log " + sha(4807) + ".." + sha(4808), "device time 36 min of 4 h", "24 runs"} {
		if !strings.Contains(panel, want) {
			t.Errorf("bisection panel lacks %q:\n%s", want, panel)
		}
	}
	if n := b.count(t, "#bisection .bisect-steps tbody tr"); n != 3 {
		t.Errorf("%d step rows, want 3", n)
	}
	row := strings.Join(strings.Fields(b.text(t, `#bisection tr[data-step="1"]`)), " ")
	for _, want := range []string{"1 · verify", "ci-4808 vs ci-4804", "s24-a", "6+6", "0.0022", "−13.1%", "differs"} {
		if !strings.Contains(row, strings.ReplaceAll(want, "−", "-")) && !strings.Contains(row, want) {
			t.Errorf("step 1 row %q lacks %q", row, want)
		}
	}
	if got := b.count(t, "#bisection .build-chip.skipped"); got != 1 {
		t.Errorf("%d skipped build chips, want 1 (ci-4806)", got)
	}
	if got := b.count(t, "#bisection .build-chip.bad"); got != 1 {
		t.Errorf("%d bad build chips, want 1 (ci-4808)", got)
	}
	b.screenshot(t, "alert-bisection")
	b.do(t, "390 px viewport", chromedp.EmulateViewport(390, 844))
	b.open(t, f.url, fmt.Sprintf("/alerts/%d", gid))
	if fit := eval[pageFit](t, b, overflowJS); fit.PageWidth > fit.View || len(fit.Wide) > 0 {
		t.Errorf("390 px alert page: %.0f px wide; sticking out: %q", fit.PageWidth, fit.Wide)
	}
}

// sha is a made-up git sha of build ci-<i>.
func sha(i int) string { return strings.Repeat(fmt.Sprintf("%08x", 0x9813d000+i), 5) }
