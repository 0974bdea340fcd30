// Package apidocs serves the coordinator's interactive API reference at
// /docs: Swagger UI, vendored as built assets (see assets/VENDOR.md), that
// renders the coordinator's own OpenAPI 3.1 document from /openapi.json.
//
// Everything the page loads comes from the coordinator itself, so /docs
// works on a lab network without internet; the Content-Security-Policy of
// its responses says so (no other origin for scripts, styles, images or
// requests). Swagger UI styles elements inline, so style-src allows
// 'unsafe-inline' on these responses only; the dashboard's own pages keep
// the stricter policy.
//
// The package depends on the standard library only, so the API package can
// mount it without linking the dashboard.
package apidocs

import (
	"embed"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/lesfarm/lesfarm/dashboard/internal/asset"
)

//go:embed assets
var files embed.FS

// Path is where the page is served; its assets live under Path + "/assets/".
const Path = "/docs"

// csp is the Content-Security-Policy of every response of this package.
const csp = "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; " +
	"connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

var types = map[string]string{
	".html": "text/html; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".txt":  "text/plain; charset=utf-8",
	".md":   "text/markdown; charset=utf-8",
}

var (
	once    sync.Once
	assets  map[string]*asset.Asset
	loadErr error
)

func load() {
	assets, loadErr = asset.Load(files, "assets", types)
	if loadErr == nil && assets["index.html"] == nil {
		loadErr = fmt.Errorf("apidocs: index.html is not embedded")
	}
}

// Mount registers the page and its assets on mux ("GET /docs" and
// "GET /docs/assets/").
func Mount(mux *http.ServeMux) {
	h := Handler()
	mux.Handle("GET "+Path, h)
	mux.Handle("GET "+Path+"/assets/", h)
}

// Handler answers Path with the page and Path/assets/NAME with an asset;
// anything else below Path is a 404.
func Handler() http.Handler {
	once.Do(load)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if loadErr != nil {
			http.Error(w, loadErr.Error(), http.StatusInternalServerError)
			return
		}
		name := "index.html"
		if p := r.URL.Path; p != Path {
			n, ok := strings.CutPrefix(p, Path+"/assets/")
			if !ok || n == "index.html" || strings.Contains(n, "/") {
				http.NotFound(w, r)
				return
			}
			name = n
		}
		a := assets[name]
		if a == nil {
			http.NotFound(w, r)
			return
		}
		asset.Write(w, r, a, csp)
	})
}
