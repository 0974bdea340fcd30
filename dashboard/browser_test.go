package dashboard_test

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/lesfarm/lesfarm/coordinator/api"
	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Run(m)) }

// TestDashboardInBrowser loads every view in headless Chromium against the
// real API over a real Postgres and reads the numbers the page shows.
func TestDashboardInBrowser(t *testing.T) {
	b := newBrowser(t)
	f := newFarm(t)
	runID, groupID := f.seed(t)
	card := fmt.Sprintf(`.alert-card[data-id="%d"]`, groupID)

	t.Run("regressions", func(t *testing.T) {
		b.open(t, f.url, "/")
		if n := b.count(t, ".alert-card"); n != 1 {
			t.Fatalf("%d alert cards, want 1", n)
		}
		pctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
		defer cancel()
		const pending = "1 regression awaits triage on main · show only those"
		if _, err := chromedp.Run(pctx, chromedp.Poll[bool](fmt.Sprintf(`document.querySelector('.pending-line').textContent === %q`, pending))); err != nil {
			t.Errorf("pending line %q, want %q", b.text(t, ".pending-line"), pending)
		}
		head := b.text(t, card+" .card-head")
		for _, want := range []string{"regression", "new", "device-specific · Galaxy S24"} {
			if !strings.Contains(head, want) {
				t.Errorf("card head %q lacks %q", head, want)
			}
		}
		if meta := b.text(t, card+" dl.meta"); !strings.Contains(meta, "ci-4808") || !strings.Contains(meta, "les-ladder") {
			t.Errorf("card meta %q lacks the build at change or the suite", meta)
		}
		row := b.text(t, card+" table.alerts tbody tr[data-alert-id]")
		for _, want := range []string{"decode throughput", "Galaxy S24", "31.5 tok/s → 27.3 tok/s", "−13.5%", "p < 0.001", "7 / 3"} {
			if !strings.Contains(row, want) {
				t.Errorf("alert row %q lacks %q", row, want)
			}
		}
		if attr := b.text(t, card+" ul.attribution"); !strings.Contains(attr, "predictor recall (layers 10–17)") || !strings.Contains(attr, alertMoved) || !strings.Contains(attr, "−22.0%") {
			t.Errorf("attribution %q", attr)
		}
		b.screenshot(t, "regressions")
	})

	t.Run("triage", func(t *testing.T) {
		// Without a token the page explains how to get one and sends nothing.
		b.do(t, "click without token", chromedp.Click(chromedp.CSS(card+` button[data-status="acknowledged"]`)),
			chromedp.WaitVisible(chromedp.CSS("#token-dialog[open]")))
		b.do(t, "paste token", chromedp.SendKeys(chromedp.CSS("#token-dialog input"), f.token),
			chromedp.Click(chromedp.CSS(`#token-dialog button[value="save"]`)), chromedp.WaitNotPresent(chromedp.CSS("#token-dialog[open]")))
		if msg := b.text(t, card+" .triage-msg"); !strings.Contains(msg, "lesfarm token create") {
			t.Errorf("no-token message %q", msg)
		}
		if g, _ := f.st.GetAlertGroup(context.Background(), groupID); g.Status != store.AlertNew {
			t.Fatalf("status changed without a token: %s", g.Status)
		}
		b.do(t, "acknowledge", chromedp.SendKeys(chromedp.CSS(card+" input.note"), "bisecting: expert prefetch change"),
			chromedp.Click(chromedp.CSS(card+` button[data-status="acknowledged"]`)),
			chromedp.WaitVisible(chromedp.CSS(card+`[data-status="acknowledged"]`)))
		g, err := f.st.GetAlertGroup(context.Background(), groupID)
		if err != nil || g.Status != store.AlertAcknowledged || g.Note != "bisecting: expert prefetch change" {
			t.Fatalf("after triage: %v status %q note %q", err, g.Status, g.Note)
		}
		if tok := b.text(t, "#token-button"); tok != "API token ✓" {
			t.Errorf("token button %q", tok)
		}
		// The stored token survives a reload; filters reach the API.
		b.open(t, f.url, "/?status=acknowledged")
		if n := b.count(t, card+`[data-status="acknowledged"]`); n != 1 {
			t.Fatalf("acknowledged filter shows %d cards", n)
		}
		if n := b.count(t, ".pending-line strong"); n != 0 {
			t.Errorf("pending line still shown after triage")
		}
		b.open(t, f.url, "/?status=fixed")
		if e := b.text(t, ".empty h3"); e != "No alert groups match these filters." {
			t.Errorf("empty filter text %q", e)
		}
	})

	t.Run("series", func(t *testing.T) {
		b.open(t, f.url, "/series?suite=les-ladder&metric=decode_tps")
		c := b.chart(t, ".chart-card")
		if c == nil || len(c.Series) != 2 {
			t.Fatalf("chart %+v, want 2 series (one per device model)", c)
		}
		if c.Bands != 2 {
			t.Errorf("%d stddev bands drawn, want 2", c.Bands)
		}
		if c.Rings != 1 {
			t.Errorf("%d changed points ringed, want 1", c.Rings)
		}
		if n := b.count(t, `.chart .change-regression[data-seq="8"]`); n != 1 {
			t.Errorf("%d change markers at seq 8, want 1", n)
		}
		if href := b.count(t, fmt.Sprintf(`table.series-table tr[data-device="Galaxy S24"] a[href="/runs/%d"]`, runID)); href != 1 {
			t.Errorf("latest build does not link to its run")
		}
		if got := b.text(t, `table.series-table tr[data-device="Galaxy S24"] td.latest`); got != s24Latest {
			t.Errorf("Galaxy S24 latest %q, want %q", got, s24Latest)
		}
		if got := b.text(t, `table.series-table tr[data-device="Pixel 8"] td.latest`); got != pixLatest {
			t.Errorf("Pixel 8 latest %q, want %q", got, pixLatest)
		}
		if got := b.text(t, `table.series-table tr[data-device="Pixel 8"] td.delta`); got != "+0.5%" {
			t.Errorf("Pixel 8 change %q, want +0.5%%", got)
		}
		if got := b.text(t, `table.series-table tr[data-device="Galaxy S24"] td:last-child`); got != "▼ −13.5% at ci-4808" {
			t.Errorf("Galaxy S24 change point cell %q", got)
		}
		// The URL records the effective selection, so it can be shared.
		loc, _ := chromedp.Run(b.ctx, chromedp.Location())
		if !strings.Contains(loc, "config=lookahead") || !strings.Contains(loc, "lineage=main") {
			t.Errorf("location %q lacks the selected config and lineage", loc)
		}
		// Hover shows both devices' values at a build.
		// The chart fills the card, and hovering at the change shows both
		// devices' values at that build.
		box, err := chromedp.Run(b.ctx, chromedp.Evaluate[[]float64](`(() => {
			const r = document.querySelector('.chart .change-line').getBoundingClientRect();
			const c = document.querySelector('.chart-holder').getBoundingClientRect();
			const s = document.querySelector('.chart .uplot').getBoundingClientRect();
			return [r.x, r.y + r.height / 2, s.width, c.width];
		})()`))
		if err != nil {
			t.Fatal(err)
		}
		if box[2] < box[3]-2 || box[2] > box[3]+2 {
			t.Errorf("chart is %.0f px wide in a %.0f px card", box[2], box[3])
		}
		b.do(t, "hover", chromedp.MouseEvent(chromedp.MouseMoved, box[0]+1, box[1]), chromedp.WaitVisible(chromedp.CSS(".tooltip")))
		if tip := b.text(t, ".tooltip"); !strings.Contains(tip, "build ci-4808") || !strings.Contains(tip, "27.25 ± 0.30 tok/s") || !strings.Contains(tip, "20.80 ± 0.30 tok/s") {
			t.Errorf("tooltip at build ci-4808: %q", tip)
		}
		b.screenshot(t, "series")
		// Dragging across builds 2–5 zooms the x axis to them: the change
		// at build 8 leaves the view. A double-click zooms back out.
		at, err := chromedp.Run(b.ctx, chromedp.Evaluate[[]float64](`(() => {
			const u = document.querySelector('.chart').plot, r = u.over.getBoundingClientRect();
			return [r.left + u.valToPos(1, 'x'), r.left + u.valToPos(4, 'x'), r.top + r.height / 2];
		})()`))
		if err != nil {
			t.Fatal(err)
		}
		b.do(t, "drag to zoom",
			chromedp.MouseEvent(chromedp.MousePressed, at[0], at[2], chromedp.ButtonLeft, chromedp.ClickCount(1)),
			chromedp.MouseEvent(chromedp.MouseMoved, (at[0]+at[1])/2, at[2], chromedp.ButtonLeft),
			chromedp.MouseEvent(chromedp.MouseMoved, at[1], at[2], chromedp.ButtonLeft),
			chromedp.MouseEvent(chromedp.MouseReleased, at[1], at[2], chromedp.ButtonLeft, chromedp.ClickCount(1)))
		zoomed := `(() => { const u = document.querySelector('.chart').plot; return [u.scales.x.min, u.scales.x.max, document.querySelector('.chart .change').hidden ? 1 : 0]; })()`
		if z := eval[[]float64](t, b, zoomed); len(z) != 3 || math.Abs(z[0]-1) > 0.1 || math.Abs(z[1]-4) > 0.1 || z[2] != 1 {
			t.Errorf("after dragging over builds 2–5: x from %v, want [1 4] with the change marker hidden", z)
		}
		b.do(t, "double-click",
			chromedp.MouseEvent(chromedp.MousePressed, at[1], at[2], chromedp.ButtonLeft, chromedp.ClickCount(1)),
			chromedp.MouseEvent(chromedp.MouseReleased, at[1], at[2], chromedp.ButtonLeft, chromedp.ClickCount(1)),
			chromedp.MouseEvent(chromedp.MousePressed, at[1], at[2], chromedp.ButtonLeft, chromedp.ClickCount(2)),
			chromedp.MouseEvent(chromedp.MouseReleased, at[1], at[2], chromedp.ButtonLeft, chromedp.ClickCount(2)))
		if z := eval[[]float64](t, b, zoomed); len(z) != 3 || z[0] != 0 || z[1] != 9 || z[2] != 0 {
			t.Errorf("after a double-click: x from %v, want [0 9] with the change marker shown", z)
		}
		// Switching metric re-queries (SetValue fires "change").
		b.do(t, "metric", chromedp.SetValue(chromedp.CSS(`select[name="metric"]`), "predictor_recall"))
		pctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
		defer cancel()
		if _, err := chromedp.Run(pctx, chromedp.Poll[bool](`location.search.includes('metric=predictor_recall') && document.body.dataset.ready === '/series'`)); err != nil {
			t.Fatalf("switch metric: %v", err)
		}
		if got := b.text(t, `table.series-table tr[data-device="Galaxy S24"] td.latest`); got != "0.640 ± 0.010" {
			t.Errorf("recall latest %q", got)
		}
	})

	t.Run("alert detail", func(t *testing.T) {
		b.open(t, f.url, fmt.Sprintf("/alerts/%d", groupID))
		if c := b.chart(t, ".chart-card"); c == nil || len(c.Series) != 2 {
			t.Errorf("detail chart %+v, want both device models", c)
		}
		if n := b.count(t, ".chart-card .chart .change-regression"); n != 1 {
			t.Errorf("detail chart has %d change markers", n)
		}
		b.screenshot(t, "alert")
	})

	t.Run("runs", func(t *testing.T) {
		b.open(t, f.url, "/runs")
		if n := b.count(t, "table.runs-table tbody tr"); n != 2 {
			t.Fatalf("%d runs listed, want 2", n)
		}
		row := b.text(t, fmt.Sprintf(`tr[data-run-id="%d"]`, runID))
		for _, want := range []string{"succeeded", "smoke", "ci-4810", "0123456789", "Pixel 8", "took ", "1 / "} {
			if !strings.Contains(row, want) {
				t.Errorf("run row %q lacks %q", row, want)
			}
		}
		if n := b.count(t, `tr[data-state="queued"]`); n != 1 {
			t.Errorf("%d queued runs shown", n)
		}
		b.screenshot(t, "runs")
		b.do(t, "open run", chromedp.Click(chromedp.CSS(fmt.Sprintf(`tr[data-run-id="%d"] a`, runID))),
			chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`body[data-ready="/runs/%d"]`, runID))))
		if got := b.text(t, "table.results-table td.decode"); got != runDecode {
			t.Errorf("run decode %q, want %q", got, runDecode)
		}
		b.screenshot(t, "run")
		// The API sends the timeout as a Go duration string ("10m0s"); the
		// page shows it formatted, not as a nanosecond count.
		if meta := b.text(t, "dl.meta"); !regexp.MustCompile(`timeout\s*\d+(\.\d)? (min|h|s)`).MatchString(meta) {
			t.Errorf("run meta %q shows no formatted timeout", meta)
		}
		res := b.text(t, "table.results-table tbody tr")
		for _, want := range []string{"lookahead/budget=25%", "valid", "2.9%", "180.2 ± 3.1 tok/s", "1.520 ± 0.040 s", "3.00 GiB", "0.710", "0.820", "0.120", "12.0 MiB/tok", "5 (+1)"} {
			if !strings.Contains(res, want) {
				t.Errorf("results row %q lacks %q", res, want)
			}
		}
	})

	t.Run("devices", func(t *testing.T) {
		b.open(t, f.url, "/devices")
		if n := b.count(t, "table.devices-table tbody tr"); n != 3 {
			t.Fatalf("%d devices, want 3", n)
		}
		emu := b.text(t, `tr[data-device-id="emu-mid-1"]`)
		for _, want := range []string{"phone-mid", "emulated", "ufs3-8g", "online", "pool=ci", "12.0 GiB RAM", "just now"} {
			if !strings.Contains(emu, want) {
				t.Errorf("emulated device row %q lacks %q", emu, want)
			}
		}
		if real := b.text(t, `tr[data-device-id="s24-a"] td:nth-child(3)`); real != "real" {
			t.Errorf("real device kind %q", real)
		}
		b.do(t, "device history", chromedp.Click(chromedp.CSS(`tr[data-device-id="pixel8-a"] a[href^="/runs?device_id="]`)),
			chromedp.WaitVisible(chromedp.CSS(`body[data-ready="/runs"]`)))
		if n := b.count(t, "table.runs-table tbody tr"); n != 1 || b.count(t, fmt.Sprintf(`tr[data-run-id="%d"]`, runID)) != 1 {
			t.Errorf("pixel8-a history shows %d runs, want its one run", n)
		}
		b.screenshot(t, "devices")
	})

	t.Run("formatting", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
		defer cancel()
		got, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`import('/ui/format.js').then(f => [
			f.fmtValue('decode_tps', 1234.5), f.fmtValue('ttft_ms', 85.25), f.fmtValue('ttft_ms', 1234), f.fmtValue('peak_memory_bytes', 3.5 * 2 ** 30),
			f.fmtValue('hit_rate', 0.8234), f.fmtValue('predictor_recall.l12', 0.5), f.fmtValue('bytes_per_token', 512),
			f.fmtMeanSD('decode_tps', 1234.5, 12.34), f.fmtMeanSD('decode_tps', 20.1, 0), f.fmtPct(-0.135), f.fmtPct(0.0049), f.fmtPct(-Infinity),
			f.fmtP(0.0001), f.fmtP(0.02345), f.fmtDuration(850), f.fmtDuration(7500000), f.fmtNum(NaN), f.fmtNum(-0.0001, 0),
			f.fmtDuration(f.parseGoDuration('30m0s')), f.fmtDuration(f.parseGoDuration('1h30m')), f.fmtDuration(f.parseGoDuration('1.5s')),
			String(f.parseGoDuration('250ms')), String(f.parseGoDuration('2h3m4.5s'))])`, chromedp.EvalAwaitPromise))
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"1,235 tok/s", "85.3 ms", "1.23 s", "3.50 GiB", "0.823", "0.500", "512 B/tok",
			"1,235 ± 12 tok/s", "20.1 tok/s", "−13.5%", "+0.5%", "−∞%", "p < 0.001", "p = 0.023", "850 ms", "2 h 05 min", "—", "0",
			"30 min", "1 h 30 min", "1.5 s", "250", "7384500"}
		if strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("formatting:\n got %q\nwant %q", got, want)
		}
	})

	t.Run("chart edge cases", func(t *testing.T) {
		// No points, one point, a flat series without stddev, a gap, a
		// change outside the shown builds: the chart draws without throwing.
		ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
		defer cancel()
		got, err := chromedp.Run(ctx, chromedp.Evaluate[[]int](`Promise.all([import('/ui/chart.js'), import('/ui/plot.js').then((p) => p.loadUPlot())]).then(([c]) => {
			const pt = (seq, value, stddev) => ({ seq, value, stddev, n: 3, build: 'b' + seq });
			const cases = [
				{ series: [], metric: 'decode_tps' },
				{ series: [{ id: 1, label: 'a', color: '#000', points: [] }], metric: 'decode_tps' },
				{ series: [{ id: 1, label: 'a', color: '#000', points: [pt(5, 10, 0.5)] }], metric: 'ttft_ms' },
				{ series: [{ id: 1, label: 'a', color: '#000', points: [pt(1, 7, 0), pt(2, 7, 0), pt(9, 7, 0)] },
				           { id: 2, label: 'b', color: '#111', points: [pt(3, 0.5, 0.1)] }], metric: 'hit_rate', zero: true,
				  changes: [{ seq: 99, direction: 'regression', rel: -0.1, text: 'x', seriesIds: new Set([1]) }] },
			];
			return cases.map(o => {
				const el = c.renderChart(o);
				document.body.append(el);
				const u = el.querySelector('.chart').plot;
				const n = u ? u.data.slice(1).flat().filter((v) => v !== null).length : 0;
				el.remove();
				return n;
			});
		})`, chromedp.EvalAwaitPromise))
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got) != "[0 0 1 4]" {
			t.Errorf("points drawn per case %v, want [0 0 1 4]", got)
		}
	})
}

// TestDashboardEmptyFarm loads every view against an empty database: each
// explains what to do, and nothing throws.
func TestDashboardEmptyFarm(t *testing.T) {
	// The browser logs the API's 404s for the unknown run and alert.
	b := newBrowser(t, "/v1/runs/99", "/v1/alerts/99")
	f := newFarm(t)
	for _, tc := range []struct{ path, title, hint string }{
		{"/", "No regressions detected.", "lesfarm run --suite smoke"},
		{"/series", "No series yet.", "lesfarm run --suite smoke"},
		{"/runs", "No runs yet.", "lesfarm run --suite smoke"},
		{"/devices", "No devices registered.", "lesfarm agent"},
		{"/runs/99", "Run #99 does not exist.", ""},
		{"/alerts/99", "Alert group #99 does not exist.", ""},
	} {
		b.open(t, f.url, tc.path)
		if got := b.text(t, ".empty h3"); got != tc.title {
			t.Errorf("%s: empty state %q, want %q", tc.path, got, tc.title)
		}
		if tc.hint != "" && !strings.Contains(b.text(t, ".empty"), tc.hint) {
			t.Errorf("%s: empty state lacks the hint %q", tc.path, tc.hint)
		}
	}
	b.open(t, f.url, "/nowhere")
	if got := b.text(t, ".empty h3"); got != "No page at /nowhere" {
		t.Errorf("unknown page: %q", got)
	}
	// The API next to the page is untouched by the catch-all.
	for path, want := range map[string]string{"/v1/alerts": `"items":[]`, "/healthz": `"ok"`, "/openapi.json": `"openapi"`, "/v1/nope": `"status":404`} {
		resp, err := http.Get(f.url + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(body), want) || strings.Contains(string(body), "<html") {
			t.Errorf("GET %s: %d %.200s", path, resp.StatusCode, body)
		}
	}
	req, _ := http.NewRequest(http.MethodPatch, f.url+"/", nil)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("PATCH /: %v %v", err, resp)
	}
}

// TestDashboardAuthReads: on a coordinator that requires tokens for reads,
// the page says how to get one, and works once it is pasted.
func TestDashboardAuthReads(t *testing.T) {
	b := newBrowser(t, "401 (Unauthorized)")
	f := newFarm(t, func(d *api.Deps) { d.RequireAuthForReads = true })
	b.open(t, f.url, "/runs")
	if e := b.text(t, ".error"); !strings.Contains(e, "Could not load runs") || !strings.Contains(e, "lesfarm token create") {
		t.Errorf("401 without a token: %q", e)
	}
	b.do(t, "paste token", chromedp.Click(chromedp.CSS("#token-button")), chromedp.WaitVisible(chromedp.CSS("#token-dialog[open]")),
		chromedp.SendKeys(chromedp.CSS("#token-dialog input"), f.token), chromedp.Click(chromedp.CSS(`#token-dialog button[value="save"]`)))
	b.open(t, f.url, "/runs")
	if got := b.text(t, ".empty h3"); got != "No runs yet." {
		t.Errorf("with a token: %q", got)
	}
}
