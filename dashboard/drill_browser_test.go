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

// seedLadderRun stores a finished three-config run (on-demand, lookahead,
// scheduled) with n measured decode steps per config streamed as telemetry:
// config c's step i takes (20-5c) ms, of which (6-3c)·(i%2) ms stall, and
// layer l hits l+1 experts and misses 2.
func (f *farm) seedLadderRun(t *testing.T, n, layers int) int64 {
	t.Helper()
	ctx := context.Background()
	st := f.st
	if _, err := st.UpsertDevice(ctx, &store.UpsertDeviceParams{ID: "drill-1", TTL: time.Minute, Coordinator: "test",
		Fingerprint: protocol.Fingerprint{Platform: "linux", DeviceModel: "phone-flagship", Emulated: true}}); err != nil {
		t.Fatal(err)
	}
	spec, err := jobs.Builtin("smoke")
	if err != nil {
		t.Fatal(err)
	}
	_, runs, err := st.CreateRuns(ctx, &store.CreateRunsParams{Spec: spec, Build: "ci-9", Selector: &jobs.Selector{DeviceModel: "phone-flagship"}})
	if err != nil {
		t.Fatal(err)
	}
	g, err := st.ClaimRun(ctx, &store.ClaimRunParams{DeviceID: "drill-1", RunIDs: []int64{runs[0].ID}, LeaseTTL: time.Minute, Coordinator: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.AckAssignment(ctx, g.Run.ID, g.Token); err != nil {
		t.Fatal(err)
	}
	var samples []protocol.Sample
	for c := range 3 {
		for i := range n {
			lc := &protocol.LayerCounts{}
			for l := range layers {
				lc.Hits = append(lc.Hits, int32(l+1))
				lc.Misses = append(lc.Misses, 2)
				lc.PrefetchUsed = append(lc.PrefetchUsed, int32(c))
				lc.PrefetchWasted = append(lc.PrefetchWasted, 1)
			}
			samples = append(samples, protocol.Sample{ConfigIndex: c, Step: i, Phase: protocol.PhaseDecode, Tokens: 1,
				DurationNS: int64(20-5*c) * 1e6, StallNS: int64((6-3*c)*(i%2)) * 1e6, BytesRead: 4 << 20, Layers: lc})
		}
	}
	var batches []*protocol.TelemetryBatch
	for seq := 0; len(samples) > 0; seq++ {
		k := min(len(samples), 200)
		batches = append(batches, &protocol.TelemetryBatch{V: protocol.Version, RunID: g.Run.ID, Token: g.Token, DeviceID: "drill-1", Seq: uint64(seq), Samples: samples[:k]})
		samples = samples[k:]
	}
	if _, err := st.InsertTelemetry(ctx, batches); err != nil {
		t.Fatal(err)
	}
	var cfgs []protocol.ConfigResult
	for c, key := range []string{"on-demand/budget=20%", "lookahead/budget=20%", "scheduled/budget=20%"} {
		tps := 1000 / float64(20-5*c)
		cfgs = append(cfgs, protocol.ConfigResult{ConfigIndex: c, ConfigKey: key, DecodeTPS: protocol.Stat{N: 3, Mean: tps, Stddev: 0.5},
			Valid: true, Repetitions: 1, HitRate: 0.5, StallFraction: 0.1})
	}
	now := time.Now()
	if _, err := st.CompleteRun(ctx, &protocol.Result{RunID: g.Run.ID, Token: g.Token, DeviceID: "drill-1", Outcome: protocol.OutcomeSucceeded,
		StartedAt: now.Add(-time.Minute), FinishedAt: now, Configs: cfgs}); err != nil {
		t.Fatal(err)
	}
	return g.Run.ID
}

// TestRunDrillDown opens a finished run and reads what is inside it: the
// ladder of its configs with speedups, the decode timeline and per-layer
// charts (uPlot, vendored), the per-layer table and the stall share; then
// switches config, which the URL keeps.
func TestRunDrillDown(t *testing.T) {
	f := newFarm(t)
	id := f.seedLadderRun(t, 1500, 6)
	b := newBrowser(t)
	path := fmt.Sprintf("/runs/%d", id)
	b.open(t, f.url, path)
	if got := eval[[]string](t, b, `[...document.querySelectorAll('table.ladder-table tbody tr')].map(r => r.querySelector('.mode').textContent + ' ' + r.querySelector('.vs-base').textContent + ' ' + r.querySelector('.vs-prev').textContent)`); strings.Join(got, ",") != "on-demand ×1.00 —,lookahead ×1.33 ×1.33,scheduled ×2.00 ×1.50" {
		t.Errorf("ladder rows %q", got)
	}
	if n := b.count(t, ".timeline-plot .uplot canvas"); n != 1 {
		t.Fatalf("timeline chart: %d canvases", n)
	}
	if n := b.count(t, ".layer-plot .uplot canvas"); n != 1 {
		t.Fatalf("layer chart: %d canvases", n)
	}
	if got := b.text(t, ".timeline-plot .u-title"); !strings.Contains(got, "1500 steps in 600 buckets") {
		t.Errorf("timeline title %q: the server should have downsampled 1500 steps to 600", got)
	}
	// Config 0: every other step stalls 6 of 20 ms → 15%.
	if got := b.text(t, ".stall-share"); got != "15.0%" {
		t.Errorf("stall share %q, want 15.0%%", got)
	}
	if n := b.count(t, "table.layers-table tbody tr"); n != 6 {
		t.Errorf("layer table rows %d", n)
	}
	if got := eval[string](t, b, `document.querySelector('table.layers-table tr[data-layer="2"]').textContent`); got != "245003000015000.6000.0000.000" {
		t.Errorf("layer 2 row %q", got)
	}
	b.do(t, "pick scheduled", chromedp.SetValue(chromedp.CSS("#config-select"), "2"),
		chromedp.Evaluate[chromedp.Void](`document.querySelector('#config-select').dispatchEvent(new Event('change'))`),
		chromedp.WaitVisible(chromedp.CSS(".timeline-plot .uplot")))
	b.do(t, "scheduled drawn", chromedp.Poll[chromedp.Void](`document.querySelector('.stall-share') && document.querySelector('.stall-share').textContent === '0.0%'`))
	if q := eval[string](t, b, `new URLSearchParams(location.search).get('config')`); q != "2" {
		t.Errorf("URL keeps config %q", q)
	}
	if got := eval[string](t, b, `document.querySelector('table.layers-table tr[data-layer="0"]').textContent`); !strings.HasSuffix(got, "0.3330.6670.500") {
		t.Errorf("scheduled layer 0 row %q (precision 2/3, recall 2/4)", got)
	}
	b.screenshot(t, "run-drill")
}
