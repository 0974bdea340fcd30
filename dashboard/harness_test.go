package dashboard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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
		chromedp.WindowSize(1360, 900),
		chromedp.Flag("disable-quic", true), chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true))
	// A Chromium that exits before it serves DevTools is retried with a
	// fresh profile: on a loaded CI machine it failed so once in a full
	// run (its wrapper script's memory check, dbus) and started on the
	// next try. A browser that never starts still fails the test.
	var ctx context.Context
	var err error
	for attempt := 1; attempt <= 3; attempt++ {
		o := slices.Concat(opts, []chromedp.ExecAllocatorOption{chromedp.UserDataDir(t.TempDir())})
		actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), o...)
		c, cancelCtx := chromedp.NewContext(actx)
		if err = chromedp.Do(c); err == nil {
			ctx = c
			t.Cleanup(func() { cancelCtx(); cancelAlloc() })
			break
		}
		cancelCtx()
		cancelAlloc()
		t.Logf("start chromium %s, attempt %d: %v", bin, attempt, err)
	}
	if ctx == nil {
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
// body[data-ready] to the path once the view's data is in the DOM). Every
// page must load everything from the coordinator's own
// origin: a resource from anywhere else fails the test (a request the
// page's CSP blocks never loads, and its console error fails the test
// already).
func (b *browser) open(t *testing.T, url, path string) {
	t.Helper()
	b.do(t, "open "+path, chromedp.Navigate(url+path), chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`body[data-ready=%q]`, strings.SplitN(path, "?", 2)[0]))))
	for _, u := range eval[[]string](t, b, `performance.getEntriesByType('resource').map((e) => e.name)`) {
		if !strings.HasPrefix(u, url+"/") && !strings.HasPrefix(u, "data:") && !strings.HasPrefix(u, "blob:") {
			t.Errorf("%s loaded %s, outside the coordinator's origin %s", path, u, url)
		}
	}
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

// chartSeries is one series as a chart drew it.
type chartSeries struct {
	Lineage, Device string
	Points          int  // points on the canvas (non-null values)
	Dashed          bool // drawn with a dash pattern
}

// chartState is what the first chart matching a selector drew, read from
// its uPlot instance and draw record rather than from pixels.
type chartState struct {
	Series       []chartSeries
	Bands, Rings int // ±stddev bands and ringed change points drawn
}

// chart reads the state of the first .chart under css (nil: no chart).
func (b *browser) chart(t *testing.T, css string) *chartState {
	t.Helper()
	return eval[*chartState](t, b, fmt.Sprintf(`(() => {
		const el = document.querySelector(%q);
		if (!el || !el.plot) return null;
		const u = el.plot;
		return {
			series: u.series.slice(1).map((s, k) => ({ lineage: el.meta[k].lineage, device: el.meta[k].device,
				points: u.data[k + 1].filter((v) => v !== null).length, dashed: !!(s.dash && s.dash.length) })),
			bands: el.drawn.bands, rings: el.drawn.rings,
		};
	})()`, css+" .chart"))
}

// lineages lists the lineage of every series of c, in order.
func (c *chartState) lineages() string {
	if c == nil {
		return "(no chart)"
	}
	var l []string
	for _, s := range c.Series {
		l = append(l, s.Lineage)
	}
	return strings.Join(l, ",")
}
