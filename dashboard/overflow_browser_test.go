package dashboard_test

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/lesfarm/lesfarm/coordinator/store"
)

// demoLineage and demoBuild name builds as the demo does: ids that share
// a long prefix and differ only in their tail.
const demoLineage = "demo-20261205T101500"

func demoBuild(n int) string { return fmt.Sprintf("%s-b%d", demoLineage, n) }

// seedDemoSeries records decode series of two device models over eight
// demo builds, so a chart's x axis has to tell builds apart by their tail.
func (f *farm) seedDemoSeries(t *testing.T) {
	t.Helper()
	var ps []store.AddRegressPointParams
	for n := 1; n <= 8; n++ {
		for _, model := range []string{"phone-mid", "phone-flagship"} {
			ps = append(ps, store.AddRegressPointParams{
				Series: store.RegressSeries{Suite: "les-ladder", Config: "lookahead/budget=25%", Metric: "decode_tps", DeviceModel: model, OSMajor: "14", Lineage: demoLineage},
				Point:  store.RegressPoint{Seq: int64(n), Value: 30 + float64(n%3), Stddev: 0.5, N: 3, Build: demoBuild(n)},
			})
		}
	}
	if _, err := f.st.AddRegressPoints(context.Background(), ps); err != nil {
		t.Fatal(err)
	}
}

// pageFit is what overflowJS finds on a page.
type pageFit struct {
	PageWidth, View float64
	Wide            []string // elements sticking out of the viewport, outermost only
	Axes            []string // unreadable x-axis labels: duplicates, overlaps, clipped
	Labels          []string // the first chart's x-axis labels
}

// overflowJS measures the page against the viewport, and reads every
// chart's x-axis labels from its uPlot instance (the labels are drawn on
// the canvas): their text must be unique, they must not overlap, and each
// must lie inside the canvas (the last one unclipped).
const overflowJS = `(() => {
	const W = innerWidth, wide = [], axes = [];
	const name = (el) => el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') + (el.classList.length ? '.' + [...el.classList].join('.') : '') + (el.name ? '[name=' + el.name + ']' : '');
	const contained = (el) => { for (let p = el.parentElement; p && p !== document.body; p = p.parentElement) if (getComputedStyle(p).overflowX !== 'visible') return true; return false; };
	const out = new Set();
	for (const el of document.body.querySelectorAll('*')) {
		const r = el.getBoundingClientRect();
		if (!r.width || !r.height || contained(el)) continue;
		if (r.right > W + 0.5 || r.left < -0.5 || r.width > W + 0.5) {
			if (el.parentElement && out.has(el.parentElement)) { out.add(el); continue; }
			out.add(el);
			wide.push(name(el) + ' ' + Math.round(r.left) + '..' + Math.round(r.right));
		}
	}
	const cv = document.createElement('canvas').getContext('2d');
	let first = [];
	document.querySelectorAll('.chart, .uplot-holder').forEach((el, c) => {
		const u = el.plot;
		if (!u) return;
		const ax = u.axes[0], vals = ax._values || [], splits = ax._splits || [];
		cv.font = ax.font[0];
		const scale = ax.font[1] / ax.font[2], left = u.bbox.left / devicePixelRatio;
		const labels = [];
		vals.forEach((v, i) => {
			if (v === '' || v === null || v === undefined) return;
			const x = left + u.valToPos(splits[i], 'x'), w = cv.measureText(String(v)).width / scale;
			labels.push({ v: String(v), a: x - w / 2, b: x + w / 2 });
		});
		if (!c) first = labels.map((l) => l.v);
		const seen = new Set();
		labels.forEach((l, i) => {
			if (seen.has(l.v)) axes.push('chart ' + c + ': label ' + JSON.stringify(l.v) + ' repeats');
			seen.add(l.v);
			if (l.a < -0.5 || l.b > u.width + 0.5) axes.push('chart ' + c + ': label ' + JSON.stringify(l.v) + ' clipped (' + Math.round(l.a) + '..' + Math.round(l.b) + ' of ' + u.width + ')');
			if (i && labels[i - 1].b + 2 > l.a) axes.push('chart ' + c + ': labels ' + JSON.stringify(labels[i - 1].v) + ' and ' + JSON.stringify(l.v) + ' overlap');
		});
	});
	return { pageWidth: Math.max(document.documentElement.scrollWidth, document.body.scrollWidth), view: W, wide: wide.slice(0, 8), axes, labels: first };
})()`

// TestDashboardFitsEveryWidth loads every page at a phone's 390 px and a
// desktop's 1360 px and fails on horizontal overflow (a page wider than
// the screen, or any element sticking out of it) and on unreadable chart
// x-axis labels (the same label twice, labels overlapping, or clipped).
func TestDashboardFitsEveryWidth(t *testing.T) {
	f := newFarm(t)
	runID, groupID := f.seed(t)
	bf := f.seedBuilds(t)
	ladder := f.seedLadderRun(t, 200, 4)
	f.seedDemoSeries(t)
	keys := []string{"on-demand/budget=25%", "lookahead/budget=25%"}
	f.finishRun(t, "demo-phone-mid", "phone-mid", demoBuild(4), keys, []float64{20, 30}, []float64{0.4, 0.8})
	f.finishRun(t, "demo-phone-mid", "phone-mid", demoBuild(5), keys, []float64{20, 22}, []float64{0.4, 0.4})
	pages := []string{
		"/", fmt.Sprintf("/alerts/%d", groupID),
		"/series?suite=les-ladder&metric=decode_tps",
		"/series?suite=les-ladder&metric=decode_tps&lineage=" + demoLineage,
		"/runs", fmt.Sprintf("/runs/%d", runID), fmt.Sprintf("/runs/%d?config=1", ladder), fmt.Sprintf("/runs/%d", bf.okRun),
		"/builds", "/builds/ci-5002", "/devices",
		"/compare", "/compare?suite=smoke&a_build=" + demoBuild(4) + "&a_device=phone-mid&b_build=" + demoBuild(5) + "&b_device=phone-mid",
	}
	b := newBrowser(t)
	for _, w := range []int64{390, 1360} {
		b.do(t, fmt.Sprint(w, " px viewport"), chromedp.EmulateViewport(w, 844))
		charts := 0
		for _, p := range pages {
			b.open(t, f.url, p)
			charts += b.count(t, ".chart canvas, .uplot-holder canvas")
			fit := eval[pageFit](t, b, overflowJS)
			if fit.PageWidth > fit.View || len(fit.Wide) > 0 {
				t.Errorf("%d px %s: the page is %.0f px wide in a %.0f px viewport; sticking out: %s", w, p, fit.PageWidth, fit.View, strings.Join(fit.Wide, ", "))
			}
			if w == 390 && p == "/" {
				// An alert's change and confidence are on screen without
				// scrolling its table sideways, and every value shown under
				// a name is under its own column's header.
				cells := eval[[]string](t, b, `(() => {
					const heads = [...document.querySelectorAll('table.alerts thead th')].map((th) => th.textContent.trim().toLowerCase()), out = [];
					for (const tr of document.querySelectorAll('table.alerts tr[data-alert-id]')) [...tr.children].forEach((td, i) => {
						const name = getComputedStyle(td, '::before').content.replace(/^"|"$/g, '');
						if (name !== 'none' && name !== heads[i]) out.push('column ' + heads[i] + ' is named ' + name);
						if (heads[i] !== 'change' && heads[i] !== 'confidence') return;
						const r = td.getBoundingClientRect(), box = td.closest('.card-body, .table-scroll').getBoundingClientRect();
						if (!(r.width > 0 && r.left >= box.left - 0.5 && r.right <= Math.min(box.right, innerWidth) + 0.5)) out.push(heads[i] + ' ' + td.textContent + ' needs a sideways scroll');
						else if (name !== heads[i]) out.push(heads[i] + ' has no name');
						else out.push('ok');
					});
					return out;
				})()`)
				if len(cells) == 0 || slices.ContainsFunc(cells, func(c string) bool { return c != "ok" }) {
					t.Errorf("390 px /: an alert's cells: %q, want change and confidence shown under their names without scrolling", cells)
				}
			}
			// A dropdown whose options are long (a demo's config keys and
			// build ids) stays within the screen too.
			if b.count(t, "select") > 0 {
				long := eval[pageFit](t, b, `(() => { for (const o of document.querySelectorAll('select option')) o.textContent = o.textContent + ' ' + 'lookahead/budget=25%/profile=phone-mid/'.repeat(3); return 0; })(), `+overflowJS)
				if long.PageWidth > long.View || len(long.Wide) > 0 {
					t.Errorf("%d px %s with long options: the page is %.0f px wide; sticking out: %s", w, p, long.PageWidth, strings.Join(long.Wide, ", "))
				}
			}
			for _, a := range fit.Axes {
				t.Errorf("%d px %s: %s", w, p, a)
			}
			if strings.HasPrefix(p, "/series") && strings.Contains(p, demoLineage) {
				// The demo's builds differ only in their tail: b1 … b8.
				if len(fit.Labels) < 2 || !slices.ContainsFunc(fit.Labels, func(l string) bool { return l != "" }) || slices.ContainsFunc(fit.Labels, func(l string) bool { return !regexp.MustCompile(`^b[1-8]$`).MatchString(l) }) {
					t.Errorf("%d px %s: x-axis labels %q, want the builds' distinguishing tails b1…b8", w, p, fit.Labels)
				}
				b.screenshot(t, fmt.Sprintf("fit-%d-demo-series", w))
			}
		}
		if charts < 4 {
			t.Errorf("%d px: only %d charts drawn across the pages; the axis check was not exercised", w, charts)
		}
	}
}
