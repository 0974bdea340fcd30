package apidocs

import (
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

// TestPageIsSelfContained: every script and stylesheet the page and its
// initializer reference is served by this package, none comes from another
// host, and the policy forbids other origins.
func TestPageIsSelfContained(t *testing.T) {
	mux := http.NewServeMux()
	Mount(mux)
	get := func(p string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest("GET", p, nil))
		return rec
	}
	page := get("/docs")
	if page.Code != 200 || !strings.HasPrefix(page.Header().Get("Content-Type"), "text/html") {
		t.Fatalf("/docs: %d %s", page.Code, page.Header().Get("Content-Type"))
	}
	if csp := page.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self';") || !strings.Contains(csp, "connect-src 'self'") {
		t.Fatalf("policy %q allows other origins", csp)
	}
	body := page.Body.String()
	refs := regexp.MustCompile(`(?:src|href)="([^"]+)"`).FindAllStringSubmatch(body, -1)
	var assets int
	for _, m := range refs {
		u := m[1]
		if strings.Contains(u, "://") || strings.HasPrefix(u, "//") {
			t.Errorf("page references %s on another host", u)
			continue
		}
		if strings.HasPrefix(u, "/docs/assets/") {
			assets++
			if rec := get(u); rec.Code != 200 || rec.Body.Len() == 0 {
				t.Errorf("%s: %d", u, rec.Code)
			}
		}
	}
	if assets < 4 {
		t.Fatalf("page references %d assets, want the bundle, its stylesheet, docs.js and docs.css", assets)
	}
	init := get("/docs/assets/docs.js").Body.String()
	if strings.Contains(init, "://") || !strings.Contains(init, `"/openapi.json"`) || !strings.Contains(init, "validatorUrl: null") {
		t.Fatalf("docs.js must load this origin's /openapi.json with the validator off:\n%s", init)
	}
}

func TestOnlyKnownPaths(t *testing.T) {
	mux := http.NewServeMux()
	Mount(mux)
	for _, tc := range []struct {
		path string
		code int
	}{
		{"/docs", 200},
		{"/docs/assets/swagger-ui.css", 200},
		{"/docs/assets/index.html", 404},
		{"/docs/assets/nope.js", 404},
		{"/docs/assets/sub/docs.js", 404},
		{"/docs/other", 404},
	} {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest("GET", tc.path, nil))
		if rec.Code != tc.code {
			t.Errorf("%s: %d, want %d", tc.path, rec.Code, tc.code)
		}
	}
}
