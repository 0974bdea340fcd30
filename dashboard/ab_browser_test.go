package dashboard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/lesfarm/lesfarm/coordinator/builds/buildstest"
	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/jobs"
	"github.com/lesfarm/lesfarm/protocol"
)

// TestABPage: an A/B comparison of two builds, decided as the gate
// decides (stored as the coordinator stores it), has a page with its
// verdict and, per device, config and metric, the result, p-values, the
// change with its interval, the means and the samples per side, and the
// rounds it took; the build's page and each of its runs' pages link to it;
// at 390 px the page stays within the screen.
func TestABPage(t *testing.T) {
	f := newFarm(t)
	ctx := context.Background()
	buildstest.Register(t, f.st, "ab-base", "ab-new")
	ram := int64(8 << 30)
	if _, err := f.st.UpsertDevice(ctx, &store.UpsertDeviceParams{ID: "ab-host", TTL: time.Minute,
		Fingerprint: protocol.Fingerprint{Platform: "linux", DeviceModel: "emulated:phone-mid", RAMBytes: &ram, ExecPlatform: "linux/amd64"}}); err != nil {
		t.Fatal(err)
	}
	spec, err := jobs.Builtin("smoke")
	if err != nil {
		t.Fatal(err)
	}
	ab, runs, err := f.st.CreateAB(ctx, &store.CreateABParams{Spec: spec, Build: "ab-new", Baseline: "ab-base", Lineage: "main",
		Selector: &jobs.Selector{DeviceModel: "emulated:phone-mid"}, MinEffect: 0.02, InitialRounds: 6, StepRounds: 6, MaxRounds: 30})
	if err != nil || len(runs) == 0 {
		t.Fatalf("create ab: %v (%d runs)", err, len(runs))
	}
	dec := func(metric, outcome, verdict string, p, change float64) map[string]any {
		return map[string]any{"device_id": "ab-host", "config_key": "on-demand/budget=50%", "metric": metric, "verdict": verdict, "outcome": outcome,
			"p": p, "p_ks": p, "p_mwu": p * 2, "same_threshold": 0.4, "change": change, "change_low": change - 0.01, "change_high": change + 0.01,
			"level": 0.95, "cv": 0.012, "mean_a": 40.0, "mean_b": 40 * (1 + change), "n_a": 6, "n_b": 6, "reason": "p ≤ 0.01 and the change is at least 2.0%"}
	}
	doc, _ := json.Marshal(map[string]any{
		"summary":   "regression: ab-host on-demand/budget=50% decode_tps -13.1% [-14.1%, -12.1%] (p 0.0022)",
		"decisions": []map[string]any{dec("decode_tps", "regression", "different", 0.0022, -0.131), dec("prefill_tps", "same", "same", 0.62, 0.003)},
	})
	if err := f.st.FinishAB(ctx, ab.ID, "regression", doc); err != nil {
		t.Fatal(err)
	}

	b := newBrowser(t)
	b.open(t, f.url, fmt.Sprintf("/ab/%d", ab.ID))
	head := b.text(t, ".view-head")
	for _, want := range []string{fmt.Sprintf("A/B #%d", ab.ID), "regression", "ab-new", "against baseline ab-base"} {
		if !strings.Contains(head, want) {
			t.Errorf("head %q lacks %q", head, want)
		}
	}
	if got := b.text(t, ".ab-rounds"); !strings.HasPrefix(got, "6 of at most 30") {
		t.Errorf("rounds %q", got)
	}
	if n := b.count(t, "table.ab-decisions tbody tr"); n != 2 {
		t.Fatalf("%d decision rows, want 2", n)
	}
	row := strings.Join(strings.Fields(b.text(t, `table.ab-decisions tr[data-metric="decode_tps"]`)), " ")
	for _, want := range []string{"ab-host", "on-demand/budget=50%", "regression", "0.0022", "−13.1%", "[−14.1%, −12.1%]", "6+6"} {
		if !strings.Contains(row, want) && !strings.Contains(row, strings.ReplaceAll(want, "−", "-")) {
			t.Errorf("decode row %q lacks %q", row, want)
		}
	}
	if got := b.text(t, `table.ab-decisions tr[data-metric="prefill_tps"] td:nth-child(4)`); got != "same" {
		t.Errorf("prefill result %q, want same", got)
	}
	b.screenshot(t, "ab-page")

	// Reachable from the build page and from its runs.
	b.open(t, f.url, "/builds/ab-new")
	if got := b.text(t, fmt.Sprintf(`#ab li[data-ab="%d"]`, ab.ID)); !strings.Contains(got, "against ab-base") || !strings.Contains(got, "regression") {
		t.Errorf("build page's A/B entry %q", got)
	}
	// The baseline's page lists it too, as the baseline.
	b.open(t, f.url, "/builds/ab-base")
	if got := b.text(t, fmt.Sprintf(`#ab li[data-ab="%d"][data-side="baseline"]`, ab.ID)); !strings.Contains(got, "baseline for ab-new") || !strings.Contains(got, "regression") {
		t.Errorf("baseline's build page A/B entry %q", got)
	}
	b.open(t, f.url, fmt.Sprintf("/runs/%d", runs[0].ID))
	if got := b.text(t, "a.ab-link"); got != fmt.Sprintf("A/B #%d", ab.ID) {
		t.Errorf("run page's A/B link %q", got)
	}

	b.do(t, "390 px viewport", chromedp.EmulateViewport(390, 844))
	b.open(t, f.url, fmt.Sprintf("/ab/%d", ab.ID))
	if fit := eval[pageFit](t, b, overflowJS); fit.PageWidth > fit.View || len(fit.Wide) > 0 {
		t.Errorf("390 px A/B page: %.0f px wide; sticking out: %q", fit.PageWidth, fit.Wide)
	}
}
