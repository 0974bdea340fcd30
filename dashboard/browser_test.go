package dashboard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/lesfarm/lesfarm/coordinator/api"
	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/dashboard"
	"github.com/lesfarm/lesfarm/internal/testenv"
	"github.com/lesfarm/lesfarm/jobs"
	"github.com/lesfarm/lesfarm/protocol"
)

func TestMain(m *testing.M) { os.Exit(testenv.Run(m)) }

// farm is the real REST API with the dashboard mounted next to it, as the
// coordinator serves them, on a fresh migrated database.
type farm struct {
	url   string
	st    *store.Store
	token string
}

func newFarm(t *testing.T, opts ...func(*api.Deps)) *farm {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, testenv.MigratedPostgresURL(t), store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	d := api.Deps{Store: st, Logger: slog.New(slog.DiscardHandler), Mount: dashboard.Mount}
	for _, o := range opts {
		o(&d)
	}
	h, _, err := api.New(d)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	tok, _, err := st.CreateAPIToken(ctx, "dashboard-test")
	if err != nil {
		t.Fatal(err)
	}
	return &farm{url: srv.URL, st: st, token: tok}
}

// Seeded values the browser must show, formatted.
const (
	s24Latest  = "27.25 ± 0.30 tok/s" // Galaxy S24 decode after the regression
	pixLatest  = "21.00 ± 0.30 tok/s" // Pixel 8 decode at the last build
	runDecode  = "41.5 ± 1.2 tok/s"   // the completed run's decode throughput
	alertMoved = "0.820 → 0.640"      // predictor recall attribution
)

// seed inserts, through the real store, what a night of the farm leaves:
// three devices (one emulated), a completed run with results and a queued
// one, decode series of two device models over ten builds with a
// regression on one, and the alert group the detector would record.
func (f *farm) seed(t *testing.T) (runID int64, groupID int64) {
	t.Helper()
	ctx := context.Background()
	st := f.st
	for _, d := range []struct {
		id, platform, model, profile string
		emulated                     bool
	}{
		{"pixel8-a", "android", "Pixel 8", "", false},
		{"s24-a", "android", "Galaxy S24", "", false},
		{"emu-mid-1", "linux", "phone-mid", "ufs3-8g", true},
	} {
		ram := int64(12 << 30)
		if _, err := st.UpsertDevice(ctx, &store.UpsertDeviceParams{ID: d.id, TTL: time.Minute, Coordinator: "test",
			Labels: map[string]string{"pool": "ci"},
			Fingerprint: protocol.Fingerprint{Platform: d.platform, DeviceModel: d.model, OSVersion: "14", SoC: "Tensor G3",
				Cores: 9, RAMBytes: &ram, Emulated: d.emulated, Profile: d.profile}}); err != nil {
			t.Fatal(err)
		}
	}

	// A run that completed on pixel8-a, and one still queued.
	spec, err := jobs.Builtin("smoke")
	if err != nil {
		t.Fatal(err)
	}
	_, runs, err := st.CreateRuns(ctx, &store.CreateRunsParams{Spec: spec, Build: "ci-4810", GitSHA: "0123456789abcdef0123",
		Selector: &jobs.Selector{DeviceModel: "Pixel 8"}})
	if err != nil {
		t.Fatal(err)
	}
	g, err := st.ClaimRun(ctx, &store.ClaimRunParams{DeviceID: "pixel8-a", RunIDs: []int64{runs[0].ID}, LeaseTTL: time.Minute, Coordinator: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.AckAssignment(ctx, g.Run.ID, g.Token); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if _, err := st.CompleteRun(ctx, &protocol.Result{RunID: g.Run.ID, Token: g.Token, DeviceID: "pixel8-a", Outcome: protocol.OutcomeSucceeded,
		StartedAt: now.Add(-192 * time.Second), FinishedAt: now,
		Configs: []protocol.ConfigResult{{ConfigIndex: 0, ConfigKey: "lookahead/budget=25%",
			DecodeTPS:  protocol.Stat{N: 5, Mean: 41.5, Median: 41.4, Stddev: 1.2, CV: 1.2 / 41.5},
			PrefillTPS: protocol.Stat{N: 5, Mean: 180.2, Stddev: 3.1}, TTFTMS: protocol.Stat{N: 5, Mean: 1520, Stddev: 40},
			PeakMemoryBytes: 3 << 30, HitRate: 0.71, PredictorRecall: 0.82, StallFraction: 0.12, BytesPerToken: 12 << 20,
			Repetitions: 5, Warmup: 1, Valid: true}}}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.CreateRuns(ctx, &store.CreateRunsParams{Spec: spec, Build: "ci-4811", Selector: &jobs.Selector{DeviceModel: "Galaxy S24"}}); err != nil {
		t.Fatal(err)
	}

	// Decode series of two models over builds 1..10; Galaxy S24 drops at 8.
	key := func(model, metric string) store.RegressSeries {
		return store.RegressSeries{Suite: "les-ladder", Config: "lookahead/budget=25%", Metric: metric, DeviceModel: model, OSMajor: "14", Lineage: "main"}
	}
	var ps []store.AddRegressPointParams
	for seq := int64(1); seq <= 10; seq++ {
		build := fmt.Sprintf("ci-%d", 4800+seq)
		s24, recall := 31.5, 0.82
		if seq >= 8 {
			s24, recall = 27.25, 0.64
		}
		ps = append(ps,
			store.AddRegressPointParams{Series: key("Pixel 8", "decode_tps"), Point: store.RegressPoint{Seq: seq, Value: 20 + float64(seq)/10, Stddev: 0.3, N: 5, Build: build}},
			store.AddRegressPointParams{Series: key("Galaxy S24", "decode_tps"), Point: store.RegressPoint{Seq: seq, RunKey: fmt.Sprint(g.Run.ID), Value: s24, Stddev: 0.3, N: 5, Build: build}},
			store.AddRegressPointParams{Series: key("Galaxy S24", "predictor_recall"), Point: store.RegressPoint{Seq: seq, Value: recall, Stddev: 0.01, N: 5, Build: build}},
		)
	}
	ids, err := st.AddRegressPoints(ctx, ps)
	if err != nil {
		t.Fatal(err)
	}
	s24Decode := ids[1]
	attr, _ := json.Marshal([]map[string]any{{"metric": "predictor_recall", "layers": "10–17", "before": 0.82, "after": 0.64,
		"relative_change": (0.64 - 0.82) / 0.82, "p_value": 0.0004, "direction": "regression", "text": "predictor recall 0.82→0.64 in layers 10–17"}})
	res, err := st.RecordAlerts(ctx, &store.RecordAlertsParams{Suite: "les-ladder", Lineage: "main", Seq: 8, Build: "ci-4808", Tolerance: 2,
		Alerts: []store.NewAlert{{SeriesID: s24Decode, Seq: 8, Direction: "regression", RelativeChange: (27.25 - 31.5) / 31.5, PValue: 0.0002,
			BeforeMean: 31.5, AfterMean: 27.25, BeforeN: 7, AfterN: 3, Attribution: attr,
			Summary: "decode −13% on Galaxy S24; predictor recall 0.82→0.64 in layers 10–17"}},
		Classify: func(g *store.AlertGroup) store.GroupClassification {
			return store.GroupClassification{Scope: "device", ScopeDetail: "Galaxy S24",
				Summary: "device change at les-ladder seq 8: decode −13% on Galaxy S24; predictor recall 0.82→0.64 in layers 10–17"}
		}})
	if err != nil || res.Group == nil {
		t.Fatalf("record alerts: %v %+v", err, res)
	}
	return g.Run.ID, res.Group.ID
}

// chromium returns a Chromium binary, or skips loudly.
func chromium(t *testing.T) string {
	t.Helper()
	for _, p := range []string{os.Getenv("CHROMIUM"), "/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"} {
		if p == "" {
			continue
		}
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("SKIPPING the dashboard browser test: no Chromium found. Install it with 'apt-get install -y chromium' (about 2 minutes), or set CHROMIUM=/path/to/chrome")
	return ""
}

// browser starts headless Chromium and collects the page's uncaught
// exceptions and console errors, which fail the test at cleanup.
type browser struct {
	ctx  context.Context
	mu   sync.Mutex
	errs []string
}

func newBrowser(t *testing.T, allowed ...string) *browser {
	t.Helper()
	bin := chromium(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.Headless,
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1360, 900),
		chromedp.Flag("disable-quic", true), chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelCtx(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium %s: %v", bin, err)
	}
	b := &browser{ctx: ctx}
	msgs := chromedp.Console(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m, err := range msgs {
			if err != nil {
				return
			}
			if (m.IsException() || m.Type == chromedp.ConsoleError) && !matchesAny(m.String()+" "+m.URL, allowed) {
				b.mu.Lock()
				b.errs = append(b.errs, fmt.Sprintf("%s:%d %s", m.URL, m.Line+1, m))
				b.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		for _, e := range b.errs {
			t.Errorf("browser console: %s", e)
		}
	})
	return b
}

func matchesAny(s string, subs []string) bool {
	for _, x := range subs {
		if strings.Contains(s, x) {
			return true
		}
	}
	return false
}

// do runs steps with a deadline for this step only.
func (b *browser) do(t *testing.T, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func (b *browser) text(t *testing.T, css string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(css)))
	if err != nil {
		t.Fatalf("text of %s: %v", css, err)
	}
	return strings.TrimSpace(s)
}

func (b *browser) count(t *testing.T, css string) int {
	t.Helper()
	n, err := chromedp.Run(b.ctx, chromedp.Evaluate[int](fmt.Sprintf(`document.querySelectorAll(%q).length`, css)))
	if err != nil {
		t.Fatalf("count %s: %v", css, err)
	}
	return n
}

// open navigates and waits until the view rendered (app.js sets
// body[data-ready] to the path once the view's data is in the DOM).
func (b *browser) open(t *testing.T, url, path string) {
	t.Helper()
	b.do(t, "open "+path, chromedp.Navigate(url+path), chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`body[data-ready=%q]`, strings.SplitN(path, "?", 2)[0]))))
}

func (b *browser) screenshot(t *testing.T, name string) {
	t.Helper()
	dir := os.Getenv("DASHBOARD_SCREENSHOTS")
	if dir == "" {
		return
	}
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Errorf("screenshot %s: %v", name, err)
		return
	}
	p := filepath.Join(dir, "lesfarm-dashboard-"+name+".png")
	if err := os.WriteFile(p, png, 0o644); err != nil {
		t.Error(err)
	}
	t.Logf("screenshot: %s", p)
}

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
		if n := b.count(t, "svg.chart g.series"); n != 2 {
			t.Fatalf("%d series drawn, want 2 (one per device model)", n)
		}
		if n := b.count(t, "svg.chart g.series path.band"); n != 2 {
			t.Errorf("%d stddev bands, want 2", n)
		}
		if n := b.count(t, `svg.chart g.change-regression[data-seq="8"]`); n != 1 {
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
			const r = document.querySelector('svg.chart g.change line').getBoundingClientRect();
			const c = document.querySelector('.chart-holder').getBoundingClientRect();
			const s = document.querySelector('svg.chart').getBoundingClientRect();
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
		if n := b.count(t, ".chart-card svg.chart g.series"); n != 2 {
			t.Errorf("detail chart has %d series, want both device models", n)
		}
		if n := b.count(t, ".chart-card svg.chart g.change-regression"); n != 1 {
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
			f.fmtP(0.0001), f.fmtP(0.02345), f.fmtDuration(850), f.fmtDuration(7500000), f.fmtNum(NaN), f.fmtNum(-0.0001, 0)])`, chromedp.EvalAwaitPromise))
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"1,235 tok/s", "85.3 ms", "1.23 s", "3.50 GiB", "0.823", "0.500", "512 B/tok",
			"1,235 ± 12 tok/s", "20.1 tok/s", "−13.5%", "+0.5%", "−∞%", "p < 0.001", "p = 0.023", "850 ms", "2 h 05 min", "—", "0"}
		if strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("formatting:\n got %q\nwant %q", got, want)
		}
	})

	t.Run("chart edge cases", func(t *testing.T) {
		// No points, one point, a flat series without stddev, a gap, a
		// change outside the shown builds: the chart draws without throwing.
		ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
		defer cancel()
		got, err := chromedp.Run(ctx, chromedp.Evaluate[[]int](`import('/ui/chart.js').then(c => {
			const pt = (seq, value, stddev) => ({ seq, value, stddev, n: 3, build: 'b' + seq });
			const cases = [
				{ series: [], metric: 'decode_tps' },
				{ series: [{ id: 1, label: 'a', color: '#000', points: [] }], metric: 'decode_tps' },
				{ series: [{ id: 1, label: 'a', color: '#000', points: [pt(5, 10, 0.5)] }], metric: 'ttft_ms' },
				{ series: [{ id: 1, label: 'a', color: '#000', points: [pt(1, 7, 0), pt(2, 7, 0), pt(9, 7, 0)] },
				           { id: 2, label: 'b', color: '#111', points: [pt(3, 0.5, 0.1)] }], metric: 'hit_rate', zero: true,
				  changes: [{ seq: 99, direction: 'regression', rel: -0.1, text: 'x', seriesIds: new Set([1]) }] },
			];
			return cases.map(o => { const el = c.renderChart(o); document.body.append(el); const n = el.querySelectorAll('circle.pt').length; el.remove(); return n; });
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

// eval evaluates a JavaScript expression in the page.
func eval[T any](t *testing.T, b *browser, js string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	if err != nil {
		t.Fatalf("eval %s: %v", js, err)
	}
	return v
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
		if got := lineages("nav.tabs a", "href"); got != "/?lineage=release-1,/series?lineage=release-1,/runs?lineage=release-1,/devices,/compare" {
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
		b.do(t, "search every lineage", chromedp.Click(chromedp.CSS(`.empty a[href*="lineage=*"]`)), chromedp.WaitVisible(chromedp.CSS(`body[data-ready="/"]`)))
		if s := eval[string](t, b, `location.search`); s != "?status=fixed&lineage=*" || lineageParam() != "*" {
			t.Errorf("search every lineage went to %q", s)
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
		if got := lineages("svg.chart g.series", "data-lineage"); got != "release-1,release-1" {
			t.Fatalf("release-1 chart draws series of %q", got)
		}
		if got := b.text(t, ".chart-title"); got != "decode throughput (tok/s) · lookahead/budget=25% · lineage release-1" {
			t.Errorf("chart title %q", got)
		}
		if got := b.text(t, `table.series-table tr[data-device="Pixel 8"] td.latest`); got != "15.50 ± 0.20 tok/s" {
			t.Errorf("release-1 Pixel 8 latest %q", got)
		}
		if n := b.count(t, `svg.chart g.change-regression[data-seq="24"]`); n != 1 || b.count(t, "svg.chart g.change") != 1 {
			t.Errorf("release-1 change markers: %d at seq 24, %d in all", n, b.count(t, "svg.chart g.change"))
		}
		if a := eval[string](t, b, `document.querySelector('svg.chart').getAttribute('aria-label')`); !strings.HasSuffix(a, "lineage release-1") {
			t.Errorf("chart aria-label %q", a)
		}
		// Every lineage: one line per series and lineage, never joined; the
		// legend names the lineage and release-1's lines are dashed.
		b.pick(t, "*", "/series")
		if got := lineages("svg.chart g.series", "data-lineage"); strings.Count(got, "main") != 2 || strings.Count(got, "release-1") != 2 {
			t.Fatalf("all-lineage chart draws series of %q, want two of each lineage", got)
		}
		pts := eval[string](t, b, `[...document.querySelectorAll('svg.chart g.series')].map(g => g.dataset.lineage + ':' + g.querySelectorAll('circle.pt').length + ':' + g.querySelectorAll('path.series-line').length).sort().join(',')`)
		if pts != "main:10:1,main:10:1,release-1:6:1,release-1:6:1" {
			t.Errorf("points and lines per series %q, want 10 per main line and 6 per release-1 line", pts)
		}
		if n := b.count(t, `svg.chart g.series[data-lineage="release-1"] path.series-line.dash-1`); n != 2 {
			t.Errorf("%d dashed release-1 lines, want 2", n)
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
		if got := lineages(".chart-card svg.chart g.series", "data-lineage"); got != "release-1,release-1" {
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
