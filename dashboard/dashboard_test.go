package dashboard_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/lesfarm/lesfarm/coordinator/api"
	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/dashboard"
	"github.com/lesfarm/lesfarm/internal/testenv"
	"github.com/lesfarm/lesfarm/protocol"
)

func TestMain(m *testing.M) { os.Exit(testenv.Run(m)) }

// coordinator serves the real API and the dashboard on a migrated database
// seeded with series, a device, a run and an alert.
func coordinator(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, testenv.MigratedPostgresURL(t), store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	h, _, err := api.New(api.Deps{Store: st, Logger: slog.New(slog.DiscardHandler), Mount: dashboard.Mount})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	var ps []store.AddRegressPointParams
	for _, model := range []string{"Pixel 8", "Galaxy S24"} {
		for seq := 1; seq <= 10; seq++ {
			v := 20 + float64(seq)/10
			if model == "Galaxy S24" {
				v = 31.5
				if seq >= 8 {
					v = 27.25 // a regression at build 8
				}
			}
			ps = append(ps, store.AddRegressPointParams{
				Series: store.RegressSeries{Suite: "les-ladder", Config: "lookahead/budget=25%", Metric: "decode_tps", DeviceModel: model, OSMajor: "14", Lineage: "main"},
				Point:  store.RegressPoint{Seq: int64(seq), Value: v, Stddev: 0.3, N: 3, Build: fmt.Sprintf("ci-%d", 4800+seq)},
			})
		}
	}
	if _, err := st.AddRegressPoints(ctx, ps); err != nil {
		t.Fatal(err)
	}
	ram := int64(12 << 30)
	if _, err := st.UpsertDevice(ctx, &store.UpsertDeviceParams{ID: "s24-a", TTL: time.Minute,
		Fingerprint: protocol.Fingerprint{Platform: "android", DeviceModel: "Galaxy S24", OSVersion: "14", RAMBytes: &ram}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Pool().Exec(ctx, `INSERT INTO alert_groups (suite, lineage, seq, build, scope, scope_detail, summary, regression)
		VALUES ('les-ladder', 'main', 8, 'ci-4808', 'device', 'Galaxy S24', 'decode_tps -13.5% on Galaxy S24 (hit_rate moved with it)', true)`); err != nil {
		t.Fatal(err)
	}
	return srv.URL
}

func TestDashboardServedWithoutBrowser(t *testing.T) {
	url := coordinator(t)
	for path, want := range map[string]string{"/": "<title>lesfarm</title>", "/ui/app.js": "renderChart", "/ui/style.css": ".chart"} {
		resp, err := http.Get(url + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), want) {
			t.Fatalf("GET %s: %d, body lacks %q", path, resp.StatusCode, want)
		}
	}
	// The dashboard must not shadow API routes or unknown paths.
	if resp, _ := http.Get(url + "/v1/nope"); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("/v1/nope: %d", resp.StatusCode)
	}
	if resp, _ := http.Get(url + "/healthz"); resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz: %d", resp.StatusCode)
	}
}

// chromium returns the path of a Chromium binary, or skips loudly.
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
	if p, err := exec.LookPath("chromium"); err == nil {
		return p
	}
	t.Skip("SKIPPING the browser test of the dashboard: no Chromium found (install it with 'apt-get install -y chromium', or set CHROMIUM=/path/to/chrome)")
	return ""
}

// TestDashboardInBrowser loads the page in headless Chromium against a real
// coordinator API and reads values the page computed from the REST API.
func TestDashboardInBrowser(t *testing.T) {
	bin := chromium(t)
	url := coordinator(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.Headless,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-quic", true), chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true))
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancel()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	ctx, cancel = context.WithTimeout(ctx, 60*time.Second)
	defer cancel()

	// Series view: one line per device model, and the table shows the
	// latest value of the regressed device.
	err := chromedp.Do(ctx,
		chromedp.Navigate(url+"/#/series?suite=les-ladder&metric=decode_tps"),
		chromedp.WaitVisible(chromedp.CSS(`#chart svg path.series-line[data-device="Galaxy S24"]`)),
	)
	if err != nil {
		t.Fatalf("series view: %v", err)
	}
	lines, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('#chart svg path.series-line').length`))
	if err != nil || lines != 2 {
		t.Fatalf("chart lines = %d, %v", lines, err)
	}
	latest, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#series-table tr[data-device="Galaxy S24"] td.latest`)))
	if err != nil || latest != "27.25" {
		t.Fatalf("Galaxy S24 latest decode_tps = %q, %v; want 27.25", latest, err)
	}
	change, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#series-table tr[data-device="Pixel 8"] td:last-child`)))
	if err != nil || change != "+0.5%" {
		t.Fatalf("Pixel 8 change = %q, %v", change, err)
	}

	// Alerts view lists the regression.
	err = chromedp.Do(ctx,
		chromedp.Navigate(url+"/#/alerts"),
		chromedp.WaitVisible(chromedp.CSS(`#alerts-table tbody tr`)),
	)
	if err != nil {
		t.Fatalf("alerts view: %v", err)
	}
	summary, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#alerts-table tbody tr td.wrap`)))
	if err != nil || !strings.Contains(summary, "decode_tps -13.5% on Galaxy S24") {
		t.Fatalf("alert summary %q, %v", summary, err)
	}

	// Devices view.
	err = chromedp.Do(ctx, chromedp.Navigate(url+"/#/devices"), chromedp.WaitVisible(chromedp.CSS(`#devices-table tbody tr[data-id="s24-a"]`)))
	if err != nil {
		t.Fatalf("devices view: %v", err)
	}
	ram, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#devices-table tbody tr[data-id="s24-a"] td:nth-child(5)`)))
	if err != nil || ram != "12 GiB" {
		t.Fatalf("device RAM cell %q, %v", ram, err)
	}
	if os.Getenv("DASHBOARD_SCREENSHOT") != "" {
		chromedp.Do(ctx, chromedp.Navigate(url+"/#/series?suite=les-ladder&metric=decode_tps"),
			chromedp.WaitVisible(chromedp.CSS(`#chart svg path.series-line`)))
		if png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)); err == nil {
			os.WriteFile(os.Getenv("DASHBOARD_SCREENSHOT"), png, 0o644)
		}
	}
}
