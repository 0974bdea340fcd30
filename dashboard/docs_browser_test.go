package dashboard_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestAPIDocsOffline renders /docs in headless Chromium and checks that the
// reference lists the API's operations and that every resource the page
// loaded came from the coordinator itself: on a lab network without
// internet the page must still work. CSP violations would show as console
// errors, which fail the test too.
func TestAPIDocsOffline(t *testing.T) {
	f := newFarm(t)
	b := newBrowser(t)
	// Swagger UI parses a 1.7 MB bundle: give it longer than the
	// dashboard's own views on a loaded 2-core machine.
	ctx, cancel := context.WithTimeout(b.ctx, 90*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate(f.url+"/docs"), chromedp.WaitReady(chromedp.CSS(".opblock"))); err != nil {
		t.Fatalf("open /docs: %v", err)
	}
	if n := b.count(t, ".opblock"); n < 20 {
		t.Fatalf("/docs shows %d operations, want the API's (≥ 20)", n)
	}
	if got := b.text(t, ".info .title"); !strings.Contains(got, "lesfarm coordinator API") {
		t.Fatalf("title %q", got)
	}
	urls := eval[[]string](t, b, `performance.getEntriesByType('resource').map(e => e.name)`)
	if len(urls) < 3 {
		t.Fatalf("resources %v: expected the bundle, the stylesheet and the OpenAPI document", urls)
	}
	for _, u := range urls {
		if !strings.HasPrefix(u, f.url+"/") {
			t.Errorf("/docs loaded %s from another origin", u)
		}
	}
	b.screenshot(t, "docs")
}
