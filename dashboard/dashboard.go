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
//     /alerts/7, ...): index.html, so the client-side router can render
//     deep links;
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
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"sync"
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
}

// csp is the Content-Security-Policy of every response: the page loads
// only its own scripts and styles and talks only to its own origin.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// asset is one embedded file, prepared for serving.
type asset struct {
	body  []byte
	gz    []byte // nil when compression does not pay
	ctype string
	etag  string
}

var (
	loadOnce sync.Once
	assets   map[string]*asset // by path below static/, e.g. "app.js"
	loadErr  error
)

func load() {
	assets = map[string]*asset{}
	loadErr = fs.WalkDir(static, "static", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := static.ReadFile(p)
		if err != nil {
			return err
		}
		ct, ok := contentTypes[path.Ext(p)]
		if !ok {
			return fmt.Errorf("dashboard: asset %s has no known content type", p)
		}
		sum := sha256.Sum256(body)
		a := &asset{body: body, ctype: ct, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
		if len(body) > 512 {
			var buf bytes.Buffer
			zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
			zw.Write(body)
			zw.Close()
			if buf.Len() < len(body)*9/10 {
				a.gz = buf.Bytes()
			}
		}
		assets[strings.TrimPrefix(p, "static/")] = a
		return nil
	})
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
	// /robots.txt) must be a 404, not the page.
	if strings.Contains(path.Base(p), ".") {
		http.Error(w, "404 page not found", http.StatusNotFound)
		return
	}
	write(w, r, assets["index.html"])
}

// write serves one asset with validators and optional gzip.
func write(w http.ResponseWriter, r *http.Request, a *asset) {
	h := w.Header()
	h.Set("Content-Type", a.ctype)
	h.Set("Cache-Control", "no-cache") // revalidate: ETags make it cheap
	h.Set("ETag", a.etag)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Content-Security-Policy", csp)
	h.Set("Vary", "Accept-Encoding")
	if match := r.Header.Get("If-None-Match"); match != "" && etagMatch(match, a.etag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	body := a.body
	if a.gz != nil && acceptsGzip(r.Header.Get("Accept-Encoding")) {
		h.Set("Content-Encoding", "gzip")
		body = a.gz
	}
	h.Set("Content-Length", fmt.Sprint(len(body)))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		w.Write(body)
	}
}

func etagMatch(header, etag string) bool {
	for _, t := range strings.Split(header, ",") {
		t = strings.TrimSpace(t)
		if t == "*" || strings.TrimPrefix(t, "W/") == etag {
			return true
		}
	}
	return false
}

func acceptsGzip(header string) bool {
	for _, part := range strings.Split(header, ",") {
		coding, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.TrimSpace(coding) != "gzip" {
			continue
		}
		q := strings.ReplaceAll(strings.TrimSpace(params), " ", "")
		return q != "q=0" && q != "q=0.0" && q != "q=0.00" && q != "q=0.000"
	}
	return false
}

// problem writes an RFC 9457 problem+json document like the API's.
func problem(w http.ResponseWriter, status int, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{
		"title":  http.StatusText(status),
		"status": status,
		"detail": detail,
	})
}
