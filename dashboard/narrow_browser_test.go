package dashboard_test

import (
	"fmt"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestDashboardNarrowScreen: at a phone's 390 px the header wraps instead
// of scrolling sideways, so every view link, the lineage picker and the
// token button are on screen without scrolling, and no view makes the
// page wider than the screen's header.
func TestDashboardNarrowScreen(t *testing.T) {
	f := newFarm(t)
	f.seed(t)
	f.seedLineage(t, "release-1")
	b := newBrowser(t)
	b.do(t, "390 px viewport", chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2)))
	for _, path := range []string{"/", "/series", "/runs", "/devices"} {
		b.open(t, f.url, path)
		shown := []string{`nav.tabs a[data-nav="regressions"]`, `nav.tabs a[data-nav="series"]`, `nav.tabs a[data-nav="runs"]`,
			`nav.tabs a[data-nav="devices"]`, "#token-button"}
		if path != "/devices" { // the fleet is not per lineage
			b.do(t, "lineage picker", chromedp.WaitVisible(chromedp.CSS("#lineage-pick")))
			shown = append(shown, "#lineage-select")
		}
		for _, css := range shown {
			r := eval[[]float64](t, b, fmt.Sprintf(`(() => { const r = document.querySelector(%q).getBoundingClientRect(); return [r.left, r.right, r.width]; })()`, css))
			if r[0] < 0 || r[1] > 390 || r[2] < 24 {
				t.Errorf("%s on %s: left %.0f right %.0f width %.0f, want within 0..390 px and usable", css, path, r[0], r[1], r[2])
			}
		}
		if w := eval[float64](t, b, `document.querySelector('header.top').scrollWidth`); w > 390 {
			t.Errorf("%s: the header is %.0f px wide at 390 px", path, w)
		}
		b.screenshot(t, "narrow"+map[string]string{"/": "-regressions"}[path]+map[bool]string{true: "", false: "-" + path[1:]}[path == "/"])
	}
}
