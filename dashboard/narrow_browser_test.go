package dashboard_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestDashboardNarrowScreen: at a phone's 390 px the views collapse into a
// menu named after the current view, the lineage picker and the token
// button stay on screen, nothing makes the page wider than the screen, and
// a table wider than the screen scrolls inside its box with a visible cue
// until its end is reached.
func TestDashboardNarrowScreen(t *testing.T) {
	f := newFarm(t)
	f.seed(t)
	f.seedLineage(t, "release-1")
	b := newBrowser(t)
	b.do(t, "390 px viewport", chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2)))
	onScreen := func(path, css string) {
		t.Helper()
		r := eval[[]float64](t, b, fmt.Sprintf(`(() => { const r = document.querySelector(%q).getBoundingClientRect(); return [r.left, r.right, r.width]; })()`, css))
		if r[0] < 0 || r[1] > 390 || r[2] < 24 {
			t.Errorf("%s on %s: left %.0f right %.0f width %.0f, want within 0..390 px and usable", css, path, r[0], r[1], r[2])
		}
	}
	views := []string{"regressions", "series", "runs", "builds", "devices", "compare"}
	scrolled := 0
	for _, tc := range []struct{ path, view string }{{"/", "Regressions"}, {"/series", "Series"}, {"/runs", "Runs"}, {"/builds", "Builds"}, {"/devices", "Devices"}} {
		b.open(t, f.url, tc.path)
		shown := []string{"#menu-button", "#token-button"}
		if tc.path != "/devices" { // the fleet is not per lineage
			b.do(t, "lineage picker", chromedp.WaitVisible(chromedp.CSS("#lineage-pick")))
			shown = append(shown, "#lineage-select")
		}
		for _, css := range shown {
			onScreen(tc.path, css)
		}
		if got := b.text(t, "#menu-label"); got != tc.view {
			t.Errorf("%s: the menu button says %q, want %q", tc.path, got, tc.view)
		}
		if n := eval[int](t, b, `[...document.querySelectorAll('nav.tabs a')].filter((a) => a.getBoundingClientRect().width > 0).length`); n != 0 {
			t.Errorf("%s: %d view links shown with the menu closed", tc.path, n)
		}
		if w := eval[float64](t, b, `Math.max(document.querySelector('header.top').scrollWidth, document.documentElement.scrollWidth)`); w > 390 {
			t.Errorf("%s: the page is %.0f px wide at 390 px", tc.path, w)
		}
		// Every table fits, or scrolls in its box with the cue shown, and
		// the cue goes once scrolled to the end.
		type cue struct {
			Overflows, Marked, NoteShown, AtEndHidden bool
		}
		cues := eval[[]cue](t, b, `[...document.querySelectorAll('.table-wrap')].map((w) => {
			const sc = w.querySelector('.table-scroll'), note = w.querySelector('.scroll-note');
			const c = { overflows: sc.scrollWidth > sc.clientWidth + 1, marked: w.classList.contains('scrolls'), noteShown: note.getBoundingClientRect().height > 0 };
			return c;
		})`)
		if n := eval[int](t, b, `[...document.querySelectorAll('table.data')].filter((t) => !t.closest('.table-wrap')).length`); n != 0 {
			t.Errorf("%s: %d tables without a scroll box", tc.path, n)
		}
		for i, c := range cues {
			if c.Overflows != c.Marked || c.Overflows != c.NoteShown {
				t.Errorf("%s table %d: overflows %v, marked %v, note shown %v", tc.path, i, c.Overflows, c.Marked, c.NoteShown)
			}
			if c.Overflows {
				scrolled++
			}
		}
		if tc.path == "/runs" {
			b.do(t, "scroll the runs table to its end", chromedp.Evaluate[chromedp.Void](`(() => { const sc = document.querySelector('.table-wrap.scrolls .table-scroll'); if (sc) sc.scrollLeft = sc.scrollWidth; })()`))
			if _, err := chromedp.Run(b.ctx, chromedp.Poll[bool](`(() => { const w = document.querySelector('.table-wrap.scrolls'); return !!w && w.classList.contains('at-end') && w.querySelector('.scroll-note').getBoundingClientRect().height === 0; })()`, chromedp.WithPollingTimeout(5*time.Second))); err != nil {
				t.Errorf("runs table scrolled to its end: the cue stays (%v)", err)
			}
		}
		b.screenshot(t, "narrow"+map[string]string{"/": "-regressions"}[tc.path]+map[bool]string{true: "", false: "-" + tc.path[1:]}[tc.path == "/"])
	}
	if scrolled == 0 {
		t.Error("no table is wider than 390 px: the scroll cue was not exercised")
	}
	// The menu opens with every view on screen, and choosing one closes it.
	b.open(t, f.url, "/")
	b.do(t, "open the menu", chromedp.Click(chromedp.CSS("#menu-button")), chromedp.WaitVisible(chromedp.CSS(`nav.tabs a[data-nav="runs"]`)))
	if got := eval[string](t, b, `document.getElementById('menu-button').getAttribute('aria-expanded')`); got != "true" {
		t.Errorf("aria-expanded %q with the menu open", got)
	}
	for _, v := range views {
		onScreen("/ (menu open)", fmt.Sprintf(`nav.tabs a[data-nav=%q]`, v))
	}
	b.screenshot(t, "narrow-menu")
	b.do(t, "choose Runs", chromedp.Click(chromedp.CSS(`nav.tabs a[data-nav="runs"]`)), chromedp.WaitVisible(chromedp.CSS(`body[data-ready="/runs"]`)))
	if got := b.text(t, "#menu-label"); got != "Runs" {
		t.Errorf("after choosing Runs the menu button says %q", got)
	}
	if n := eval[int](t, b, `[...document.querySelectorAll('nav.tabs a')].filter((a) => a.getBoundingClientRect().width > 0).length`); n != 0 {
		t.Errorf("%d view links still shown after choosing a view", n)
	}
}
