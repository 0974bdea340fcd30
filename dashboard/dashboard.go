// Package dashboard is lesfarm's web UI: a single-page application embedded
// in the binary and served by the coordinator next to its REST API.
//
// The page is vanilla JavaScript (ES modules), CSS and SVG charts drawn by
// the page itself: no CDN, no external fonts, no build step. It reads and
// writes only the REST API under /v1 (alerts, series, runs, results,
// devices), so it holds no state of its own and works against any
// coordinator of a deployment.
//
// Routes served by Handler:
//
//   - /ui/<file>: the static assets (JavaScript modules, CSS, icon), with
//     explicit content types, ETags and gzip when the client accepts it;
//   - any other GET path without a file extension (/, /series, /runs/42,
//     /alerts/7, ...), and every /builds/<id> (build ids may hold dots):
//     index.html, so the client-side router can render deep links;
//   - the API's own paths (/v1, /v1/..., /openapi*, /docs, /schemas/...,
//     /healthz, /readyz, /metrics) are never answered with the page: when
//     they reach this handler no API route matched, and the answer is a 404
//     problem+json document, as the API itself would give.
//
// Mount it on the API's mux with Mount (which registers "GET /", so every
// more specific API pattern keeps precedence and other methods still get
// the mux's 405).
package dashboard

import (
	"embed"
	"encoding/json"
	"fmt"
	"net/http"
	"path"
	"strings"
	"sync"

	"github.com/lesfarm/lesfarm/dashboard/internal/asset"
)

//go:embed static
var static embed.FS

// AssetPrefix is the URL prefix of the static assets.
const AssetPrefix = "/ui/"

// contentTypes maps asset extensions to their Content-Type. Only these
// extensions are embedded; anything else is a build mistake.
var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".svg":  "image/svg+xml",
	".json": "application/json",
	".md":   "text/markdown; charset=utf-8",
	".txt":  "text/plain; charset=utf-8",
}

// csp is the Content-Security-Policy of every response: the page loads
// only its own scripts and styles and talks only to its own origin.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

var (
	loadOnce sync.Once
	assets   map[string]*asset.Asset // by path below static/, e.g. "app.js"
	loadErr  error
)

func load() {
	assets, loadErr = asset.Load(static, "static", contentTypes)
	if loadErr == nil && assets["index.html"] == nil {
		loadErr = fmt.Errorf("dashboard: index.html is not embedded")
	}
}

// Handler returns the dashboard's handler. It is safe for concurrent use
// and may be called several times (the assets are prepared once).
func Handler() http.Handler {
	loadOnce.Do(load)
	if loadErr != nil {
		// The assets are embedded at build time, so this is a programming
		// error that tests catch; still answer rather than panic.
		err := loadErr
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		})
	}
	return http.HandlerFunc(serve)
}

// Mount registers the dashboard on mux as "GET /": the catch-all of the
// API's mux, below every API route. Pass it as coordinator.Config.Mount or
// api.Deps.Mount.
func Mount(mux *http.ServeMux) {
	mux.Handle("GET /", Handler())
}

// reserved reports whether p belongs to the API rather than the page.
func reserved(p string) bool {
	switch p {
	case "/v1", "/docs", "/healthz", "/readyz", "/metrics", "/schemas":
		return true
	}
	for _, pre := range []string{"/v1/", "/openapi", "/docs/", "/schemas/", "/healthz/", "/readyz/", "/metrics/"} {
		if strings.HasPrefix(p, pre) {
			return true
		}
	}
	return false
}

func serve(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	if reserved(p) {
		problem(w, http.StatusNotFound, "no API route "+r.Method+" "+p+"; see /openapi.json")
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		problem(w, http.StatusMethodNotAllowed, "the dashboard only answers GET and HEAD")
		return
	}
	if name, ok := strings.CutPrefix(p, AssetPrefix); ok {
		a := assets[name]
		if a == nil || name == "index.html" || strings.Contains(name, "..") {
			http.Error(w, "404 page not found", http.StatusNotFound)
			return
		}
		write(w, r, a)
		return
	}
	// Client routes have no extension; a missing file (/favicon.ico,
	// /robots.txt) must be a 404, not the page. A build's page is the
	// exception: build ids may hold dots (/builds/rel-1.3).
	if strings.Contains(path.Base(p), ".") && !strings.HasPrefix(p, "/builds/") {
		http.Error(w, "404 page not found", http.StatusNotFound)
		return
	}
	write(w, r, assets["index.html"])
}

// write serves one asset with the dashboard's policy.
func write(w http.ResponseWriter, r *http.Request, a *asset.Asset) { asset.Write(w, r, a, csp) }

// problem writes an RFC 9457 problem+json document like the API's.
func problem(w http.ResponseWriter, status int, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{ //nolint:errchkjson // the client has gone if this fails
		"title":  http.StatusText(status),
		"status": status,
		"detail": detail,
	})
}
