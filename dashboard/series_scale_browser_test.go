package dashboard_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/lesfarm/lesfarm/coordinator/store"
)

// TestSeriesAtScale charts 1,000 builds × 20 device models: the series
// endpoint downsamples on the server (into buckets of builds shared by the
// series), the response stays small, and the page draws every series from
// a local coordinator. The times are logged, as the measurement,
// and not bounded: a loaded CI host would make a time bound flaky. The
// size and point-count bounds catch a chart that stopped downsampling.
func TestSeriesAtScale(t *testing.T) {
	const builds, devices = 1000, 20
	f := newFarm(t)
	ctx := context.Background()
	// One point through the store creates each series; SQL adds the rest.
	var ps []store.AddRegressPointParams
	for d := range devices {
		ps = append(ps, store.AddRegressPointParams{
			Series: store.RegressSeries{Suite: "les-ladder", Config: "scheduled/budget=20%", Metric: "decode_tps", DeviceModel: fmt.Sprintf("Phone %02d", d), OSMajor: "15", Lineage: "main"},
			Point:  store.RegressPoint{Seq: 1, Value: 20, Stddev: 0.3, N: 3, Build: "ci-1"},
		})
	}
	if _, err := f.st.AddRegressPoints(ctx, ps); err != nil {
		t.Fatal(err)
	}
	if _, err := f.st.Pool().Exec(ctx, `
		INSERT INTO regress_points (series_id, seq, run_key, value, stddev, n, build)
		SELECT s.id, g, '', 20 + s.id % 7 + sin(g / 40.0) - CASE WHEN g > 900 THEN 3 ELSE 0 END, 0.3, 3, 'ci-' || g
		FROM regress_series s, generate_series(2, $1) g WHERE s.suite = 'les-ladder'`, builds); err != nil {
		t.Fatal(err)
	}

	path := "/v1/series?suite=les-ladder&metric=decode_tps&last=1000"
	for _, tc := range []struct {
		query   string
		maxSize int
	}{{"", 0}, {"&points=200", 800 << 10}} {
		t0 := time.Now()
		resp, err := http.Get(f.url + path + tc.query)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %v", tc.query, resp.StatusCode, err)
		}
		t.Logf("GET /v1/series last=1000%s: %d series × %d builds → %d KiB in %v", tc.query, devices, builds, len(body)>>10, time.Since(t0).Round(time.Millisecond))
		if tc.maxSize > 0 && len(body) > tc.maxSize {
			t.Errorf("downsampled response is %d KiB, want ≤ %d KiB", len(body)>>10, tc.maxSize>>10)
		}
	}

	b := newBrowser(t)
	t0 := time.Now()
	b.open(t, f.url, "/series?suite=les-ladder&metric=decode_tps&last=1000")
	took := time.Since(t0)
	c := b.chart(t, ".chart-card")
	if c == nil || len(c.Series) != devices {
		t.Fatalf("chart %+v, want %d series", c, devices)
	}
	for _, s := range c.Series {
		if s.Points < 100 || s.Points > 300 {
			t.Errorf("%s: %d points drawn for %d builds, want the server's 100–300 buckets", s.Device, s.Points, builds)
		}
	}
	api := eval[float64](t, b, `performance.getEntriesByType('resource').filter((e) => e.name.includes('/v1/series?')).map((e) => e.duration)[0] || -1`)
	t.Logf("series page with %d series × %d builds: ready %v after navigating (page, API, chart library and draw); the series request took %.0f ms of it", devices, builds, took.Round(time.Millisecond), api)
	ctx2, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	if _, err := chromedp.Run(ctx2, chromedp.WaitVisible(chromedp.CSS(".chart .uplot canvas"))); err != nil {
		t.Fatal(err)
	}
	b.screenshot(t, "series-1000x20")
}
