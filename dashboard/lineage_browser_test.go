package dashboard_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/jobs"
)

// seedLineage adds a release branch next to seed's main: one queued run
// of build rel-1.3 and decode series of both device models over builds
// 20..25 (slower than main's, so their values tell them apart), with a
// Pixel 8 regression at seq 24 and its alert group.
func (f *farm) seedLineage(t *testing.T, lineage string) (runID int64, groupID int64) {
	t.Helper()
	ctx := context.Background()
	st := f.st
	spec, err := jobs.Builtin("smoke")
	if err != nil {
		t.Fatal(err)
	}
	_, runs, err := st.CreateRuns(ctx, &store.CreateRunsParams{Spec: spec, Build: "rel-1.3", Lineage: lineage, Selector: &jobs.Selector{DeviceModel: "Pixel 8"}})
	if err != nil {
		t.Fatal(err)
	}
	key := func(model string) store.RegressSeries {
		return store.RegressSeries{Suite: "les-ladder", Config: "lookahead/budget=25%", Metric: "decode_tps", DeviceModel: model, OSMajor: "14", Lineage: lineage}
	}
	var ps []store.AddRegressPointParams
	for seq := int64(20); seq <= 25; seq++ {
		build := fmt.Sprintf("rel-1.%d", seq)
		pix := 18.0
		if seq >= 24 {
			pix = 15.5
		}
		ps = append(ps,
			store.AddRegressPointParams{Series: key("Pixel 8"), Point: store.RegressPoint{Seq: seq, Value: pix, Stddev: 0.2, N: 5, Build: build}},
			store.AddRegressPointParams{Series: key("Galaxy S24"), Point: store.RegressPoint{Seq: seq, Value: 25, Stddev: 0.2, N: 5, Build: build}})
	}
	ids, err := st.AddRegressPoints(ctx, ps)
	if err != nil {
		t.Fatal(err)
	}
	res, err := st.RecordAlerts(ctx, &store.RecordAlertsParams{Suite: "les-ladder", Lineage: lineage, Seq: 24, Build: "rel-1.24", Tolerance: 2,
		Alerts: []store.NewAlert{{SeriesID: ids[0], Seq: 24, Direction: "regression", RelativeChange: (15.5 - 18) / 18, PValue: 0.001,
			BeforeMean: 18, AfterMean: 15.5, BeforeN: 4, AfterN: 2, Summary: "decode −14% on Pixel 8"}},
		Classify: func(g *store.AlertGroup) store.GroupClassification {
			return store.GroupClassification{Scope: "device", ScopeDetail: "Pixel 8", Summary: "device change at les-ladder seq 24: decode −14% on Pixel 8"}
		}})
	if err != nil || res.Group == nil {
		t.Fatalf("record alerts: %v %+v", err, res)
	}
	return runs[0].ID, res.Group.ID
}

// pick chooses a lineage in the header selector and waits until the view
// at path rendered with it and the URL carries it.
func (b *browser) pick(t *testing.T, lineage, path string) {
	t.Helper()
	b.do(t, "select lineage "+lineage, chromedp.SetValue(chromedp.CSS("#lineage-select"), lineage))
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	js := fmt.Sprintf(`new URLSearchParams(location.search).get('lineage') === %q && location.pathname === %q && document.body.dataset.ready === %q`, lineage, path, path)
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](js)); err != nil {
		t.Fatalf("select lineage %s on %s: %v (location %s)", lineage, path, err, eval[string](t, b, `location.href`))
	}
}

// TestDashboardLineages: with alert groups, runs and series on main and
// release-1, the lineage selector filters every list, lives in the URL,
// and every group, run and chart names its lineage.
func TestDashboardLineages(t *testing.T) {
	b := newBrowser(t)
	f := newFarm(t)
	mainRun, mainGroup := f.seed(t)
	relRun, relGroup := f.seedLineage(t, "release-1")
	lineages := func(css, attr string) string { // the data-lineage of every match, in order
		return eval[string](t, b, fmt.Sprintf(`[...document.querySelectorAll(%q)].map(e => e.getAttribute(%q)).join(',')`, css, attr))
	}
	lineageParam := func() string { return eval[string](t, b, `new URLSearchParams(location.search).get('lineage')`) }

	t.Run("regressions on release-1", func(t *testing.T) {
		b.open(t, f.url, "/?lineage=release-1")
		if got := lineages(".alert-card", "data-id"); got != fmt.Sprint(relGroup) {
			t.Fatalf("cards %q, want only release-1's group %d", got, relGroup)
		}
		if got := b.text(t, fmt.Sprintf(`.alert-card[data-id="%d"] .card-head .badge.lineage`, relGroup)); got != "lineage release-1" {
			t.Errorf("card lineage badge %q", got)
		}
		if got := b.text(t, ".alert-card table.alerts tbody tr[data-alert-id]"); !strings.Contains(got, "Pixel 8") || !strings.Contains(got, "18.0 tok/s → 15.5 tok/s") {
			t.Errorf("release-1 alert row %q", got)
		}
		if got := eval[string](t, b, `document.getElementById('lineage-select').value`); got != "release-1" {
			t.Errorf("selector shows %q", got)
		}
		if got := eval[string](t, b, `[...document.querySelectorAll('#lineage-select option')].map(o => o.value + '=' + o.textContent).join('|')`); got != "*=all lineages|main=main|release-1=release-1" {
			t.Errorf("selector options %q", got)
		}
		if !eval[bool](t, b, `!document.getElementById('lineage-pick').hidden && document.getElementById('lineage-select').labels.length === 1`) {
			t.Error("the lineage selector is hidden or has no label")
		}
		ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
		defer cancel()
		want := "1 regression awaits triage on release-1 · show only those · on other lineages: main 1"
		if _, err := chromedp.Run(ctx, chromedp.Poll[bool](fmt.Sprintf(`document.querySelector('.pending-line').textContent === %q`, want))); err != nil {
			t.Errorf("pending line %q, want %q", b.text(t, ".pending-line"), want)
		}
		// Navigation keeps the lineage.
		if got := lineages("nav.tabs a", "href"); got != "/?lineage=release-1,/series?lineage=release-1,/runs?lineage=release-1,/builds?lineage=release-1,/devices,/compare" {
			t.Errorf("nav links %q", got)
		}
		b.screenshot(t, "lineage-regressions")
	})

	t.Run("switching", func(t *testing.T) {
		b.pick(t, "main", "/")
		if got := lineages(".alert-card", "data-id"); got != fmt.Sprint(mainGroup) {
			t.Errorf("main shows cards %q, want %d", got, mainGroup)
		}
		if got := lineages(".alert-card .badge.lineage", "data-lineage"); got != "main" {
			t.Errorf("main card lineage %q", got)
		}
		b.pick(t, "*", "/")
		if got := lineages(".alert-card .badge.lineage", "data-lineage"); got != "release-1,main" {
			t.Errorf("all lineages: card lineages %q, want release-1,main (newest first)", got)
		}
		// Other filters survive a lineage switch; Back restores the lineage.
		b.open(t, f.url, "/?status=new&lineage=release-1")
		b.pick(t, "main", "/")
		if s := eval[string](t, b, `location.search`); s != "?status=new&lineage=main" {
			t.Errorf("search after switch %q", s)
		}
		b.do(t, "back", chromedp.NavigateBack(), chromedp.WaitVisible(chromedp.CSS(`body[data-ready="/"]`)))
		if lineageParam() != "release-1" || lineages(".alert-card", "data-id") != fmt.Sprint(relGroup) {
			t.Errorf("back: lineage %q cards %q", lineageParam(), lineages(".alert-card", "data-id"))
		}
	})

	t.Run("default is main", func(t *testing.T) {
		b.open(t, f.url, "/")
		if lineageParam() != "main" || lineages(".alert-card", "data-id") != fmt.Sprint(mainGroup) {
			t.Errorf("default: lineage %q cards %q", lineageParam(), lineages(".alert-card", "data-id"))
		}
		// A lineage the API refuses is not sent: the default shows.
		b.open(t, f.url, "/?lineage=release%2F1")
		if lineageParam() != "main" {
			t.Errorf("invalid lineage kept: %q", lineageParam())
		}
		// A valid lineage without data: its own empty state, and the
		// selector still names it.
		b.open(t, f.url, "/?lineage=release-9")
		if got := b.text(t, ".empty h3"); got != "No regressions on lineage release-9." {
			t.Errorf("empty lineage: %q", got)
		}
		if got := eval[string](t, b, `document.getElementById('lineage-select').value`); got != "release-9" {
			t.Errorf("selector on an unseen lineage shows %q", got)
		}
		// Filters that match nothing on one lineage offer every lineage.
		b.open(t, f.url, "/?status=fixed&lineage=release-1")
		if got := b.text(t, ".empty"); !strings.Contains(got, "No alert groups match these filters.") || !strings.Contains(got, "Searched lineage release-1.") {
			t.Errorf("filtered empty state %q", got)
		}
		// body[data-ready] is already "/" before the click: wait for the
		// new URL and the view rendered for it instead.
		b.do(t, "search every lineage", chromedp.Click(chromedp.CSS(`.empty a[href*="lineage=*"]`)))
		ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
		defer cancel()
		if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`location.search === "?status=fixed&lineage=*" && document.body.dataset.ready === "/"`)); err != nil {
			t.Errorf("search every lineage went to %q: %v", eval[string](t, b, `location.search`), err)
		}
	})

	t.Run("runs", func(t *testing.T) {
		b.open(t, f.url, "/runs?lineage=release-1")
		if got := lineages("table.runs-table tbody tr", "data-run-id"); got != fmt.Sprint(relRun) {
			t.Fatalf("release-1 runs %q, want %d", got, relRun)
		}
		if got := b.text(t, fmt.Sprintf(`tr[data-run-id="%d"] td.lineage`, relRun)); got != "release-1" {
			t.Errorf("run lineage cell %q", got)
		}
		b.pick(t, "*", "/runs")
		if got := lineages("table.runs-table tbody td.lineage", "data-lineage"); got != "release-1,main,main" {
			t.Errorf("all runs' lineages %q", got)
		}
		b.screenshot(t, "lineage-runs")
		b.pick(t, "main", "/runs")
		if got := lineages("table.runs-table tbody td.lineage", "data-lineage"); got != "main,main" {
			t.Errorf("main runs' lineages %q", got)
		}
		b.open(t, f.url, "/runs?lineage=release-2")
		if got := b.text(t, ".empty h3"); got != "No runs on lineage release-2." || !strings.Contains(b.text(t, ".empty"), "lesfarm run --lineage release-2") {
			t.Errorf("empty lineage: %q", b.text(t, ".empty"))
		}
		b.open(t, f.url, fmt.Sprintf("/runs/%d", relRun))
		if got := b.text(t, "dl.meta a.lineage"); got != "release-1" {
			t.Errorf("run detail lineage %q", got)
		}
		if got := b.text(t, ".view-head .lede"); got != "smoke on build rel-1.3 · lineage release-1" {
			t.Errorf("run detail lede %q", got)
		}
		if eval[bool](t, b, `!document.getElementById('lineage-pick').hidden`) {
			t.Error("the selector shows on a run's page, where it filters nothing")
		}
		b.open(t, f.url, fmt.Sprintf("/runs/%d", mainRun))
		if got := b.text(t, "dl.meta a.lineage"); got != "main" {
			t.Errorf("main run detail lineage %q", got)
		}
	})

	t.Run("series", func(t *testing.T) {
		b.open(t, f.url, "/series?suite=les-ladder&metric=decode_tps&lineage=release-1")
		if got := b.chart(t, ".chart-card").lineages(); got != "release-1,release-1" {
			t.Fatalf("release-1 chart draws series of %q", got)
		}
		if got := b.text(t, ".chart-title"); got != "decode throughput (tok/s) · lookahead/budget=25% · lineage release-1" {
			t.Errorf("chart title %q", got)
		}
		if got := b.text(t, `table.series-table tr[data-device="Pixel 8"] td.latest`); got != "15.50 ± 0.20 tok/s" {
			t.Errorf("release-1 Pixel 8 latest %q", got)
		}
		if n := b.count(t, `.chart .change-regression[data-seq="24"]`); n != 1 || b.count(t, ".chart .change") != 1 {
			t.Errorf("release-1 change markers: %d at seq 24, %d in all", n, b.count(t, ".chart .change"))
		}
		if a := eval[string](t, b, `document.querySelector('.chart').getAttribute('aria-label')`); !strings.HasSuffix(a, "lineage release-1") {
			t.Errorf("chart aria-label %q", a)
		}
		// Every lineage: one line per series and lineage, never joined; the
		// legend names the lineage and release-1's lines are dashed.
		b.pick(t, "*", "/series")
		all := b.chart(t, ".chart-card")
		if got := all.lineages(); strings.Count(got, "main") != 2 || strings.Count(got, "release-1") != 2 {
			t.Fatalf("all-lineage chart draws series of %q, want two of each lineage", got)
		}
		var pts []string
		for _, s := range all.Series {
			pts = append(pts, fmt.Sprintf("%s:%d:%v", s.Lineage, s.Points, s.Dashed))
		}
		sort.Strings(pts)
		if got := strings.Join(pts, ","); got != "main:10:false,main:10:false,release-1:6:true,release-1:6:true" {
			t.Errorf("lineage:points:dashed per series %q, want 10 solid per main line and 6 dashed per release-1 line", got)
		}
		legend := lineages(".legend-item", "data-lineage")
		for _, want := range []string{"Pixel 8 · main", "Pixel 8 · release-1", "Galaxy S24 · main", "Galaxy S24 · release-1"} {
			if !strings.Contains(b.text(t, ".legend"), want) {
				t.Errorf("legend %q lacks %q", b.text(t, ".legend"), want)
			}
		}
		if strings.Count(legend, "release-1") != 2 {
			t.Errorf("legend lineages %q", legend)
		}
		if got := b.text(t, ".chart-title"); !strings.HasSuffix(got, "· all lineages") {
			t.Errorf("all-lineage chart title %q", got)
		}
		b.screenshot(t, "lineage-series")
		b.open(t, f.url, "/series?lineage=release-7")
		if got := b.text(t, ".empty h3"); got != "No series on lineage release-7 yet." {
			t.Errorf("series of an unseen lineage: %q", got)
		}
	})

	t.Run("alert detail", func(t *testing.T) {
		b.open(t, f.url, fmt.Sprintf("/alerts/%d", relGroup))
		if got := b.text(t, ".chart-card h3"); got != "decode throughput (tok/s) · lookahead/budget=25% · lineage release-1" {
			t.Errorf("detail chart title %q", got)
		}
		if got := b.chart(t, ".chart-card").lineages(); got != "release-1,release-1" {
			t.Errorf("detail chart series of %q", got)
		}
		if got := eval[string](t, b, `document.querySelector('main p a').getAttribute('href')`); got != "/?lineage=release-1" {
			t.Errorf("back link %q", got)
		}
	})

	t.Run("resolve", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
		defer cancel()
		got, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`import('/ui/lineage.js').then(l => [
			['', ['main', 'release-1']], ['lineage=*', ['main']], ['lineage=', ['main']], ['lineage=release-1', ['main']],
			['', ['release-2', 'release-10']], ['', ['release-1']], ['', []], ['lineage=a/b', ['main']], ['lineage=-x', ['main']],
			['lineage=' + 'x'.repeat(201), ['main']], ['lineage=x.y_z-1', []],
		].map(([q, list]) => JSON.stringify(l.resolve(new URLSearchParams(q), list))).concat(l.sortLineages(['release-10', 'main', 'release-9', 'dev']).join(' ')))`, chromedp.EvalAwaitPromise))
		if err != nil {
			t.Fatal(err)
		}
		want := []string{`"main"`, `""`, `""`, `"release-1"`, `""`, `"release-1"`, `""`, `"main"`, `"main"`, `"main"`, `"x.y_z-1"`, "main dev release-9 release-10"}
		if strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("lineage.resolve:\n got %q\nwant %q", got, want)
		}
	})
}
