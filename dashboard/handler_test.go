package dashboard

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"path"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

func get(t *testing.T, h http.Handler, method, target string, hdr ...string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(method, target, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func TestHandlerRoutes(t *testing.T) {
	t.Parallel()
	h := Handler()
	tests := []struct {
		method, path string
		status       int
		ctype        string
		bodyHas      string
	}{
		{"GET", "/", 200, "text/html; charset=utf-8", `<script type="module" src="/ui/app.js">`},
		{"HEAD", "/", 200, "text/html; charset=utf-8", ""},
		// Client routes get the page so deep links work.
		{"GET", "/series", 200, "text/html; charset=utf-8", "<title>lesfarm</title>"},
		{"GET", "/series?suite=smoke&metric=decode_tps", 200, "text/html; charset=utf-8", "<title>lesfarm</title>"},
		{"GET", "/runs/42", 200, "text/html; charset=utf-8", "<title>lesfarm</title>"},
		{"GET", "/alerts/7", 200, "text/html; charset=utf-8", "<title>lesfarm</title>"},
		{"GET", "/devices/", 200, "text/html; charset=utf-8", "<title>lesfarm</title>"},
		// A build's page, whose id may hold dots.
		{"GET", "/builds", 200, "text/html; charset=utf-8", `<a href="/builds" data-nav="builds">`},
		{"GET", "/builds/ci-4812", 200, "text/html; charset=utf-8", "<title>lesfarm</title>"},
		{"GET", "/builds/rel-1.3", 200, "text/html; charset=utf-8", "<title>lesfarm</title>"},
		{"GET", "/ui/builds.js", 200, "text/javascript; charset=utf-8", "export async function renderDetail"},
		// Assets with their real content types.
		{"GET", "/ui/app.js", 200, "text/javascript; charset=utf-8", "import * as regressions"},
		{"GET", "/ui/format.js", 200, "text/javascript; charset=utf-8", "export function fmtMeanSD"},
		{"GET", "/ui/lineage.js", 200, "text/javascript; charset=utf-8", "export function resolve"},
		// A shared link to one lineage's regressions, runs or series.
		{"GET", "/?lineage=release-3", 200, "text/html; charset=utf-8", `<select id="lineage-select">`},
		{"GET", "/runs?lineage=*&state=queued", 200, "text/html; charset=utf-8", "<title>lesfarm</title>"},
		{"GET", "/series?suite=les-ladder&lineage=release-3", 200, "text/html; charset=utf-8", "<title>lesfarm</title>"},
		{"GET", "/ui/style.css", 200, "text/css; charset=utf-8", ".chart .change-line"},
		{"GET", "/ui/favicon.svg", 200, "image/svg+xml", "<svg"},
		// Missing files are 404s, never the page (a module loaded as HTML
		// fails with a confusing MIME error).
		{"GET", "/ui/nope.js", 404, "text/plain; charset=utf-8", ""},
		{"GET", "/ui/", 404, "text/plain; charset=utf-8", ""},
		{"GET", "/ui/index.html", 404, "text/plain; charset=utf-8", ""},
		{"GET", "/favicon.ico", 404, "text/plain; charset=utf-8", ""},
		{"GET", "/robots.txt", 404, "text/plain; charset=utf-8", ""},
		// API paths are never shadowed: reaching this handler means no API
		// route matched, so the answer is the API's kind of 404.
		{"GET", "/v1", 404, "application/problem+json", `"status":404`},
		{"GET", "/v1/nope", 404, "application/problem+json", "no API route GET /v1/nope"},
		{"GET", "/v1/alerts/x/y", 404, "application/problem+json", "no API route"},
		{"POST", "/v1/runs", 404, "application/problem+json", "no API route POST /v1/runs"},
		{"GET", "/openapi.json", 404, "application/problem+json", "no API route"},
		{"GET", "/openapi.yaml", 404, "application/problem+json", "no API route"},
		{"GET", "/docs", 404, "application/problem+json", "no API route"},
		{"GET", "/schemas/Run.json", 404, "application/problem+json", "no API route"},
		{"GET", "/healthz", 404, "application/problem+json", "no API route"},
		{"GET", "/readyz", 404, "application/problem+json", "no API route"},
		{"GET", "/metrics", 404, "application/problem+json", "no API route"},
		// The page only answers reads.
		{"POST", "/", 405, "application/problem+json", "only answers GET and HEAD"},
		{"DELETE", "/series", 405, "application/problem+json", "only answers GET and HEAD"},
	}
	for _, tc := range tests {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			rec := get(t, h, tc.method, tc.path)
			if rec.Code != tc.status {
				t.Fatalf("status %d, want %d; body %q", rec.Code, tc.status, rec.Body.String())
			}
			if ct := rec.Header().Get("Content-Type"); ct != tc.ctype {
				t.Errorf("Content-Type %q, want %q", ct, tc.ctype)
			}
			if !strings.Contains(rec.Body.String(), tc.bodyHas) {
				t.Errorf("body lacks %q:\n%.300s", tc.bodyHas, rec.Body.String())
			}
			if tc.method == "HEAD" && rec.Body.Len() != 0 {
				t.Errorf("HEAD returned a body of %d bytes", rec.Body.Len())
			}
			if tc.status == 405 && rec.Header().Get("Allow") != "GET, HEAD" {
				t.Errorf("405 without Allow: %q", rec.Header().Get("Allow"))
			}
			if tc.status == 200 {
				if !strings.Contains(rec.Header().Get("Content-Security-Policy"), "default-src 'none'") {
					t.Errorf("no CSP: %q", rec.Header().Get("Content-Security-Policy"))
				}
				if rec.Header().Get("X-Content-Type-Options") != "nosniff" {
					t.Error("no nosniff")
				}
			}
			if strings.HasPrefix(tc.ctype, "application/problem+json") {
				var p struct {
					Status int    `json:"status"`
					Detail string `json:"detail"`
				}
				if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil || p.Status != tc.status || p.Detail == "" {
					t.Errorf("not a problem document: %v %q", err, rec.Body.String())
				}
			}
		})
	}
}

func TestHandlerCachingAndGzip(t *testing.T) {
	t.Parallel()
	h := Handler()
	rec := get(t, h, "GET", "/ui/app.js")
	etag := rec.Header().Get("ETag")
	if etag == "" || rec.Header().Get("Cache-Control") != "no-cache" {
		t.Fatalf("ETag %q Cache-Control %q", etag, rec.Header().Get("Cache-Control"))
	}
	plain := rec.Body.Bytes()
	if r := get(t, h, "GET", "/ui/app.js", "If-None-Match", etag); r.Code != http.StatusNotModified || r.Body.Len() != 0 {
		t.Fatalf("revalidation: %d with %d bytes", r.Code, r.Body.Len())
	}
	if r := get(t, h, "GET", "/ui/app.js", "If-None-Match", `"other"`); r.Code != http.StatusOK {
		t.Fatalf("stale ETag: %d", r.Code)
	}
	// The page's ETag differs from the script's.
	if get(t, h, "GET", "/", "If-None-Match", etag).Code != http.StatusOK {
		t.Fatal("index revalidated with app.js's ETag")
	}
	for _, tc := range []struct {
		accept string
		gz     bool
	}{{"gzip, deflate, br", true}, {"br;q=1.0, gzip;q=0.8", true}, {"gzip;q=0", false}, {"identity", false}, {"", false}} {
		r := get(t, h, "GET", "/ui/style.css", "Accept-Encoding", tc.accept)
		gotGz := r.Header().Get("Content-Encoding") == "gzip"
		if gotGz != tc.gz {
			t.Errorf("Accept-Encoding %q: gzip %v, want %v", tc.accept, gotGz, tc.gz)
		}
		if r.Header().Get("Vary") != "Accept-Encoding" {
			t.Errorf("no Vary header")
		}
	}
	r := get(t, h, "GET", "/ui/app.js", "Accept-Encoding", "gzip")
	if cl := r.Header().Get("Content-Length"); cl != strconv.Itoa(r.Body.Len()) || r.Body.Len() >= len(plain) {
		t.Errorf("Content-Length %s for %d gzip bytes (plain %d)", cl, r.Body.Len(), len(plain))
	}
	zr, err := gzip.NewReader(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	unz, err := io.ReadAll(zr)
	if err != nil || !bytes.Equal(unz, plain) {
		t.Fatalf("gzip body does not decompress to the asset: %v", err)
	}
}

// TestModulesResolve checks that every relative ES module import names an
// embedded file, and that the page only reaches the API through api.js
// (which refuses paths outside /v1).
func TestModulesResolve(t *testing.T) {
	t.Parallel()
	imp := regexp.MustCompile(`(?m)^\s*import\s[^'"]*['"](\./[^'"]+)['"]`)
	n := 0
	err := fs.WalkDir(static, "static", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || path.Ext(p) != ".js" {
			return err
		}
		src, _ := static.ReadFile(p)
		for _, m := range imp.FindAllStringSubmatch(string(src), -1) {
			n++
			target := path.Join(path.Dir(p), m[1])
			if _, err := fs.Stat(static, target); err != nil {
				t.Errorf("%s imports %s, which is not embedded", p, m[1])
			}
		}
		if path.Base(p) != "api.js" && regexp.MustCompile(`\bfetch\(|XMLHttpRequest|EventSource\(`).Match(src) {
			t.Errorf("%s talks to the network itself; only api.js may", p)
		}
		if strings.HasPrefix(p, "static/vendor/") {
			// A vendored library's licence banner names its home page.
			src = regexp.MustCompile(`^/\*![^*]*\*+(?:[^/*][^*]*\*+)*/`).ReplaceAll(src, nil)
		}
		if regexp.MustCompile(`https?://(?:[a-z0-9-]+\.)+[a-z]{2,}/`).Match(bytes.ReplaceAll(src, []byte("http://www.w3.org/2000/svg"), nil)) {
			t.Errorf("%s references an external URL; the dashboard must work offline", p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 10 {
		t.Fatalf("found only %d imports; the import pattern is broken", n)
	}
}

func TestReserved(t *testing.T) {
	t.Parallel()
	for p, want := range map[string]bool{
		"/v1": true, "/v1/": true, "/v1/alerts": true, "/openapi.json": true, "/openapi-3.0.yaml": true, "/docs": true,
		"/schemas/X.json": true, "/healthz": true, "/readyz": true, "/metrics": true,
		"/": false, "/v1x": false, "/series": false, "/runs/1": false, "/documents": false, "/metricsx": false,
	} {
		if got := reserved(p); got != want {
			t.Errorf("reserved(%q) = %v, want %v", p, got, want)
		}
	}
}

// FuzzServe: for any path, method and caching headers the handler answers
// without panicking, never serves the page on an API path, and answers
// only with the statuses it documents.
func FuzzServe(f *testing.F) {
	for _, seed := range []struct{ method, path, inm, ae string }{
		{"GET", "/", "", "gzip"}, {"GET", "/ui/app.js", `W/"x", *`, "gzip;q=0"}, {"HEAD", "/v1/x", "", ""},
		{"POST", "/series", "", ""}, {"GET", "/ui/../index.html", "", "br, gzip;q=0.5"}, {"GET", "/openapi.json", "", ""},
		{"GET", "/a/b.c/d", "\"\"", ",,;"}, {"GET", "/%2e%2e/ui", "", ""},
		{"GET", "/release-3", "", "gzip"}, {"GET", "/runs/release-3/x.js", "", ""}, {"GET", "/ui/lineage.js", "", "gzip"},
	} {
		f.Add(seed.method, seed.path, seed.inm, seed.ae)
	}
	h := Handler()
	f.Fuzz(func(t *testing.T, method, p, inm, ae string) {
		req, err := http.NewRequest("GET", "http://x/", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Method = method
		req.URL.Path = "/" + strings.TrimPrefix(p, "/")
		req.Header.Set("If-None-Match", inm)
		req.Header.Set("Accept-Encoding", ae)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		switch rec.Code {
		case 200, 304, 404, 405:
		default:
			t.Fatalf("%s %q: status %d", method, req.URL.Path, rec.Code)
		}
		if reserved(req.URL.Path) && (rec.Code != 404 || strings.HasPrefix(rec.Header().Get("Content-Type"), "text/html")) {
			t.Fatalf("API path %q answered %d %s", req.URL.Path, rec.Code, rec.Header().Get("Content-Type"))
		}
	})
}

// bundleBudget is what the page's own code may cost a browser on first
// load: the sum of its assets as served with gzip. vendorBudget is the
// vendored chart library's, which only a run's page loads. The page is read
// on slow VPNs and air-gapped networks; raise them only with a reason in
// the commit (42 KiB: the run drill-down, drill.js and plot.js, and the
// compare view, compare.js; 44 KiB: the expert heatmap, heatmap.js, and the
// device trace; 45 KiB: those together with the phone-width menu; 46 KiB:
// the heatmap's axis labels; 52 KiB: the builds page, builds.js, and the
// run's provenance with the run states' tooltips; 54 KiB: chart axes that
// label builds by their distinguishing part, compare's Welch intervals and
// the devices' builds, issue 34; 56 KiB: the alert page's bisection
// panel, bisect.js, issue 30; 59 KiB: the A/B page, ab.js, and the alert
// page's devices, issue 30).
const (
	bundleBudget = 59 << 10
	vendorBudget = 24 << 10
)

func TestBundleBudget(t *testing.T) {
	t.Parallel()
	Handler()
	var own, vendor, plain int
	for name, a := range assets {
		n := a.Served()
		if strings.HasPrefix(name, "vendor/") {
			vendor += n
		} else {
			own += n
		}
		plain += a.Size()
		t.Logf("%-28s %6d bytes, %6d served", name, a.Size(), n)
	}
	t.Logf("total %d bytes; served gzipped: own %d (budget %d), vendored %d (budget %d)", plain, own, bundleBudget, vendor, vendorBudget)
	if own > bundleBudget {
		t.Errorf("the dashboard's own code costs %d gzipped bytes, over its budget of %d", own, bundleBudget)
	}
	if vendor > vendorBudget {
		t.Errorf("the vendored libraries cost %d gzipped bytes, over their budget of %d", vendor, vendorBudget)
	}
}

// TestStrictCSPCompatible: the page works under its CSP (script-src and
// style-src 'self' without 'unsafe-inline'), so no asset may rely on
// inline script or style, and API data never becomes HTML.
func TestStrictCSPCompatible(t *testing.T) {
	t.Parallel()
	for _, d := range []string{"'unsafe-inline'", "'unsafe-eval'", "http:", "https:", "*"} {
		if strings.Contains(csp, d) {
			t.Errorf("CSP allows %s: %s", d, csp)
		}
	}
	bad := map[string]*regexp.Regexp{
		".html": regexp.MustCompile(`(?i)<style\b|\sstyle\s*=|\son[a-z]+\s*=|javascript:|<script\b[^>]*>[^<]`),
		".js":   regexp.MustCompile(`innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function|setAttribute\(\s*['"](?:style|on)|\bstyle:|['"]style['"]\s*:|javascript:`),
	}
	err := fs.WalkDir(static, "static", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		re := bad[path.Ext(p)]
		if re == nil {
			return nil
		}
		src, _ := static.ReadFile(p)
		for _, tag := range regexp.MustCompile(`(?i)<script\b[^>]*>`).FindAll(src, -1) {
			if !regexp.MustCompile(`\ssrc="/ui/[a-z]+\.js"`).Match(tag) {
				t.Errorf("%s: %s is an inline script", p, tag)
			}
		}
		for _, m := range re.FindAll(src, -1) {
			t.Errorf("%s: %q breaks the strict CSP or inserts HTML", p, m)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
