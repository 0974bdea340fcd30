package dashboard_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/jobs"
	"github.com/lesfarm/lesfarm/protocol"
)

// Planted expert load of seedHeatRun: in config c, layer l's demand-hot
// expert and its miss-hot expert (a different one).
func demandHot(c, l int) int { return (5*l + 3 + 17*c) % heatExperts }
func missHot(c, l int) int   { return (7*l + 40 + 17*c) % heatExperts }

const heatLayers, heatExperts = 12, 64

// seedHeatRun stores a finished two-config run on device dev whose expert
// counts plant, per layer, a demand-hot expert (demanded every one of 900
// steps, never missed) and a miss-hot one (demanded and missed 300 times);
// every other expert is demanded (e+l)%5 times, missed once when odd. When
// states > 0 the device reported that many heartbeats of rising
// temperature and falling battery.
func (f *farm) seedHeatRun(t *testing.T, dev string, states int) int64 {
	t.Helper()
	ctx := context.Background()
	st := f.st
	if _, err := st.UpsertDevice(ctx, &store.UpsertDeviceParams{ID: dev, TTL: time.Minute, Coordinator: "test",
		Fingerprint: protocol.Fingerprint{Platform: "android", DeviceModel: "phone-" + dev}}); err != nil {
		t.Fatal(err)
	}
	spec, err := jobs.Builtin("smoke")
	if err != nil {
		t.Fatal(err)
	}
	_, runs, err := st.CreateRuns(ctx, &store.CreateRunsParams{Spec: spec, Build: "ci-heat", Selector: &jobs.Selector{DeviceModel: "phone-" + dev}})
	if err != nil {
		t.Fatal(err)
	}
	g, err := st.ClaimRun(ctx, &store.ClaimRunParams{DeviceID: dev, RunIDs: []int64{runs[0].ID}, LeaseTTL: time.Minute, Coordinator: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.AckAssignment(ctx, g.Run.ID, g.Token); err != nil {
		t.Fatal(err)
	}
	b := &protocol.TelemetryBatch{V: protocol.Version, RunID: g.Run.ID, Token: g.Token, DeviceID: dev}
	for c := range 2 {
		b.Samples = append(b.Samples, protocol.Sample{ConfigIndex: c, Phase: protocol.PhaseDecode, Tokens: 1, DurationNS: 1e7})
		for l := range heatLayers {
			r := protocol.ExpertLoad{ConfigIndex: c, Layer: l, Steps: 900}
			for e := range heatExperts {
				d, m := int32((e+l)%5), int32(e%2)
				switch e {
				case demandHot(c, l):
					d, m = 900, 0
				case missHot(c, l):
					d, m = 300, 300
				}
				if d > 0 {
					r.Experts, r.Demand, r.Miss = append(r.Experts, int32(e)), append(r.Demand, d), append(r.Miss, min(m, d))
				}
			}
			b.Experts = append(b.Experts, r)
		}
	}
	if err := b.Validate(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.InsertTelemetry(ctx, []*protocol.TelemetryBatch{b}); err != nil {
		t.Fatal(err)
	}
	for i := range states {
		temp, batt, charging := 36+float64(i)/2, 90-float64(i), false
		if err := st.RecordDeviceState(ctx, []int64{g.Run.ID}, &protocol.DeviceState{MaxTempC: &temp, BatteryPercent: &batt, Charging: &charging, ThermalStatus: "fair"}); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now()
	var cfgs []protocol.ConfigResult
	for c, key := range []string{"on-demand/budget=20%", "scheduled/budget=20%"} {
		cfgs = append(cfgs, protocol.ConfigResult{ConfigIndex: c, ConfigKey: key, DecodeTPS: protocol.Stat{N: 1, Mean: float64(10 + c)}, Valid: true, Repetitions: 1})
	}
	if _, err := st.CompleteRun(ctx, &protocol.Result{RunID: g.Run.ID, Token: g.Token, DeviceID: dev, Outcome: protocol.OutcomeSucceeded,
		StartedAt: now.Add(-time.Minute), FinishedAt: now, Configs: cfgs}); err != nil {
		t.Fatal(err)
	}
	return g.Run.ID
}

// planted lists "layer:expert" for every layer, as canvas data-hot does.
func planted(c int, hot func(c, l int) int) string {
	var out []string
	for l := range heatLayers {
		out = append(out, fmt.Sprintf("%d:%d", l, hot(c, l)))
	}
	return strings.Join(out, " ")
}

// TestRunHeatmap opens a finished run and finds the planted hot experts in
// the layer × expert heatmap's canvas state: by demand, then by miss after
// switching the colour (kept in the URL), then in the other config; the
// hover readout gives a cell's count. The device's thermal and battery
// trace is charted; a device that reported none says so.
func TestRunHeatmap(t *testing.T) {
	f := newFarm(t)
	id := f.seedHeatRun(t, "heat-1", 20)
	quiet := f.seedHeatRun(t, "heat-2", 0)
	b := newBrowser(t)
	b.do(t, "1280 px viewport", chromedp.EmulateViewport(1280, 800))
	b.open(t, f.url, fmt.Sprintf("/runs/%d", id))
	b.do(t, "heatmap drawn", chromedp.WaitVisible(chromedp.CSS(".heatmap-canvas")))
	if got := eval[string](t, b, `document.querySelector('.heatmap-canvas').dataset.hot`); got != planted(0, demandHot) {
		t.Errorf("demand heatmap's hottest experts\n%s\nwant the planted\n%s", got, planted(0, demandHot))
	}
	if got := eval[[]int](t, b, `(() => { const h = document.querySelector('.heatmap-canvas').heat; return [h.rows, h.cols, h.max]; })()`); fmt.Sprint(got) != "[12 64 900]" {
		t.Errorf("canvas state rows, cols, max = %v", got)
	}
	// Hover the centre of layer 2's hot cell.
	hover := fmt.Sprintf(`(() => { const c = document.querySelector('.heatmap-canvas'), s = c.heat, r = c.getBoundingClientRect();
		c.dispatchEvent(new MouseEvent('mousemove', { clientX: r.left + s.left + (%d + 0.5) * s.cellWidth, clientY: r.top + s.top + 2.5 * s.cellHeight, bubbles: true }));
		return document.querySelector('.heatmap-tip').textContent; })()`, demandHot(0, 2))
	if got, want := eval[string](t, b, hover), fmt.Sprintf("layer 2, expert %d: 900 demands over 900 decode steps", demandHot(0, 2)); got != want {
		t.Errorf("hover %q, want %q", got, want)
	}
	if got := b.text(t, ".trace-plot .u-title"); got != "Device state over 20 heartbeats" {
		t.Errorf("device trace title %q", got)
	}
	if n := b.count(t, ".trace-plot .uplot canvas"); n != 1 {
		t.Errorf("device trace chart: %d canvases", n)
	}
	if got := b.text(t, ".trace-status"); got != "fair" {
		t.Errorf("thermal status %q", got)
	}
	b.screenshot(t, "run-heatmap-1280")
	b.do(t, "colour by miss", chromedp.SetValue(chromedp.CSS("#heat-metric"), "miss"),
		chromedp.Evaluate[chromedp.Void](`document.querySelector('#heat-metric').dispatchEvent(new Event('change'))`),
		chromedp.Poll[chromedp.Void](`document.querySelector('.heat-holder').dataset.metric === 'miss'`))
	if got := eval[string](t, b, `document.querySelector('.heatmap-canvas').dataset.hot`); got != planted(0, missHot) {
		t.Errorf("miss heatmap's hottest experts\n%s\nwant the planted\n%s", got, planted(0, missHot))
	}
	if q := eval[string](t, b, `new URLSearchParams(location.search).get('heat')`); q != "miss" {
		t.Errorf("URL keeps heat=%q", q)
	}
	// The other config, opened from its URL, keeps the metric.
	b.open(t, f.url, fmt.Sprintf("/runs/%d?config=1&heat=miss", id))
	b.do(t, "config 1 heatmap", chromedp.WaitVisible(chromedp.CSS(".heatmap-canvas")))
	if got := eval[string](t, b, `document.querySelector('.heatmap-canvas').dataset.hot`); got != planted(1, missHot) {
		t.Errorf("config 1 miss heatmap\n%s\nwant\n%s", got, planted(1, missHot))
	}
	b.do(t, "390 px viewport", chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2)))
	b.open(t, f.url, fmt.Sprintf("/runs/%d", id))
	b.do(t, "heatmap at 390 px", chromedp.WaitVisible(chromedp.CSS(".heatmap-canvas")))
	// The page does not scroll sideways: the heatmap scrolls in its box.
	if w := eval[float64](t, b, `document.documentElement.scrollWidth`); w > 390 {
		t.Errorf("page is %.0f px wide at 390 px", w)
	}
	if got := eval[string](t, b, `document.querySelector('.heatmap-canvas').dataset.hot`); got != planted(0, demandHot) {
		t.Errorf("390 px heatmap\n%s", got)
	}
	b.screenshot(t, "run-heatmap-390")
	// A tap on a phone shows the value too.
	tap := fmt.Sprintf(`(() => { const c = document.querySelector('.heatmap-canvas'), s = c.heat, r = c.getBoundingClientRect();
		c.dispatchEvent(new MouseEvent('click', { clientX: r.left + s.left + (%d + 0.5) * s.cellWidth, clientY: r.top + s.top + 0.5 * s.cellHeight, bubbles: true }));
		return document.querySelector('.heatmap-tip').dataset.value; })()`, demandHot(0, 0))
	if got := eval[string](t, b, tap); got != "900" {
		t.Errorf("tap on layer 0's hot cell: value %q, want 900", got)
	}
	b.open(t, f.url, fmt.Sprintf("/runs/%d", quiet))
	b.do(t, "no trace", chromedp.WaitVisible(chromedp.CSS(".trace-none")))
	if got := b.text(t, ".trace-none"); !strings.HasPrefix(got, "Not reported") {
		t.Errorf("device without readings: %q", got)
	}
	// A run whose agent sent no per-expert counts says so.
	old := f.seedLadderRun(t, 10, 2)
	b.open(t, f.url, fmt.Sprintf("/runs/%d", old))
	if got := b.text(t, ".heat-holder .empty h3"); got != "No per-expert counts for this config." {
		t.Errorf("run without expert counts: %q", got)
	}
}
