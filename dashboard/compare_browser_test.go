package dashboard_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/jobs"
	"github.com/lesfarm/lesfarm/protocol"
)

// finishRun stores a succeeded run of suite smoke on device dev (model
// model) for build, with one result per config: decode[i] tok/s and hit
// rate hit[i].
func (f *farm) finishRun(t *testing.T, dev, model, build string, keys []string, decode, hit []float64) {
	t.Helper()
	var cfgs []protocol.ConfigResult
	for i, k := range keys {
		cfgs = append(cfgs, protocol.ConfigResult{ConfigIndex: i, ConfigKey: k, DecodeTPS: protocol.Stat{N: 3, Mean: decode[i], Stddev: 0.1},
			HitRate: hit[i], Valid: true, Repetitions: 3})
	}
	f.finishRunWith(t, dev, model, build, cfgs)
}

// finishRunWith stores a succeeded run of suite smoke on device dev (model
// model) for build with the results cfgs.
func (f *farm) finishRunWith(t *testing.T, dev, model, build string, cfgs []protocol.ConfigResult) {
	t.Helper()
	ctx := context.Background()
	st := f.st
	if _, err := st.UpsertDevice(ctx, &store.UpsertDeviceParams{ID: dev, TTL: time.Minute, Coordinator: "test",
		Fingerprint: protocol.Fingerprint{Platform: "android", DeviceModel: model}}); err != nil {
		t.Fatal(err)
	}
	spec, err := jobs.Builtin("smoke")
	if err != nil {
		t.Fatal(err)
	}
	_, runs, err := st.CreateRuns(ctx, &store.CreateRunsParams{Spec: spec, Build: build, Selector: &jobs.Selector{DeviceModel: model}})
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
	now := time.Now()
	if _, err := st.CompleteRun(ctx, &protocol.Result{RunID: g.Run.ID, Token: g.Token, DeviceID: dev, Outcome: protocol.OutcomeSucceeded,
		StartedAt: now.Add(-time.Minute), FinishedAt: now, Configs: cfgs}); err != nil {
		t.Fatal(err)
	}
}

// TestCompareView compares two builds on one device model and two device
// models on one build, from a URL, and reads the deltas and their verdicts:
// a change is flagged only when the 95% Welch interval of the difference
// excludes zero (prefill 452 ± 262 → 724 ± 245 over 5 repetitions is +60%
// and within noise), and a metric measured once per run gets no verdict.
func TestCompareView(t *testing.T) {
	f := newFarm(t)
	keys := []string{"on-demand/budget=20%", "scheduled/budget=20%"}
	f.finishRun(t, "p8-a", "Pixel 8", "b1", keys, []float64{10, 20}, []float64{0.5, 0.7})
	f.finishRun(t, "p8-a", "Pixel 8", "b2", keys, []float64{10.1, 15}, []float64{0.5, 0.6})
	f.finishRun(t, "s24-a", "Galaxy S24", "b2", keys, []float64{12, 24}, []float64{0.5, 0.7})
	prefill := func(mean, sd float64) []protocol.ConfigResult {
		return []protocol.ConfigResult{{ConfigIndex: 0, ConfigKey: keys[0], Valid: true, Repetitions: 5,
			DecodeTPS: protocol.Stat{N: 5, Mean: 10 + mean/1000, Stddev: 0.05}, PrefillTPS: protocol.Stat{N: 5, Mean: mean, Stddev: sd}}}
	}
	f.finishRunWith(t, "p8-a", "Pixel 8", "demo-20261205T101500-b4", prefill(452, 262))
	f.finishRunWith(t, "p8-a", "Pixel 8", "demo-20261205T101500-b5", prefill(724, 245))
	b := newBrowser(t)

	row := func(cfg, metric string) string {
		return eval[string](t, b, `(() => { const r = document.querySelector('table.compare-table tr[data-config="`+cfg+`"][data-metric="`+metric+`"]');
			return r ? r.className.split(' ')[0] + ' ' + r.querySelector('td.delta').textContent : 'missing'; })()`)
	}
	b.open(t, f.url, "/compare?suite=smoke&a_build=b1&a_device=Pixel+8&b_build=b2&b_device=Pixel+8")
	for _, tc := range []struct{ cfg, metric, want string }{
		{"on-demand/budget=20%", "decode_tps", "cmp-noise +1.0% within noise"},
		{"scheduled/budget=20%", "decode_tps", "cmp-worse ▼ −25.0%"},
		{"scheduled/budget=20%", "hit_rate", "cmp-nospread −14.3%"},
	} {
		if got := row(tc.cfg, tc.metric); got != tc.want {
			t.Errorf("builds: %s %s = %q, want %q", tc.cfg, tc.metric, got, tc.want)
		}
	}
	if got := eval[string](t, b, `document.querySelector('table.compare-table thead').textContent`); !strings.Contains(got, "A: b1 · Pixel 8") || !strings.Contains(got, "B: b2 · Pixel 8") {
		t.Errorf("header %q", got)
	}
	b.open(t, f.url, "/compare?suite=smoke&a_build=b2&a_device=Pixel+8&b_build=b2&b_device=Galaxy+S24")
	if got := row("scheduled/budget=20%", "decode_tps"); got != "cmp-better ▲ +60.0%" {
		t.Errorf("devices: scheduled decode %q", got)
	}
	if got := eval[string](t, b, `document.querySelector('.compare-form input[name="b_device"]').value`); got != "Galaxy S24" {
		t.Errorf("form keeps the URL's selection: %q", got)
	}
	// The demo's builds: +60% prefill within the noise, +4.5% decode
	// (±0.05 over 5 repetitions) clearly better; the form and the table
	// name the builds by their tails, the whole id on hover.
	b.open(t, f.url, "/compare?suite=smoke&a_build=demo-20261205T101500-b4&a_device=Pixel+8&b_build=demo-20261205T101500-b5&b_device=Pixel+8")
	for _, tc := range []struct{ metric, want string }{
		{"prefill_tps", "cmp-noise +60.2% within noise"},
		{"decode_tps", "cmp-better ▲ +2.6%"},
	} {
		if got := row(keys[0], tc.metric); got != tc.want {
			t.Errorf("demo builds: %s = %q, want %q", tc.metric, got, tc.want)
		}
	}
	if got := eval[string](t, b, `[...document.querySelectorAll('table.compare-table thead th')].map((th) => th.textContent + '|' + th.title).join(' ; ')`); !strings.Contains(got, "A: b4 · Pixel 8|demo-20261205T101500-b4 · Pixel 8") {
		t.Errorf("demo header %q, want A named b4 with the whole id on hover", got)
	}
	type box struct{ Input, Text float64 }
	for _, name := range []string{"a_build", "b_build"} {
		bx := eval[box](t, b, `(() => { const i = document.querySelector('.compare-form input[name="`+name+`"]'), c = document.createElement('canvas').getContext('2d');
			c.font = getComputedStyle(i).font; return { input: i.clientWidth, text: c.measureText(i.value).width }; })()`)
		if bx.Text > bx.Input {
			t.Errorf("%s: the input is %.0f px wide for %.0f px of build id: the name is cut", name, bx.Input, bx.Text)
		}
	}
	b.open(t, f.url, "/compare")
	if got := b.text(t, ".compare-out .empty h3"); !strings.HasPrefix(got, "Pick a suite") {
		t.Errorf("empty compare: %q", got)
	}
	b.screenshot(t, "compare")
}
