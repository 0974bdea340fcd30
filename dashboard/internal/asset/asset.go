// Package asset prepares embedded files for serving (content type, ETag,
// gzip when it pays) and writes them with the headers every dashboard and
// API-docs response carries. The dashboard and the API docs page share it.
package asset

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/http"
	"path"
	"strings"
)

// Asset is one embedded file, prepared for serving.
type Asset struct {
	body  []byte
	gz    []byte // nil when compression does not pay
	ctype string
	etag  string
}

// Load walks dir in fsys and prepares every file, keyed by its path below
// dir. types maps extensions to Content-Type; a file with another extension
// is a build mistake and an error.
func Load(fsys fs.FS, dir string, types map[string]string) (map[string]*Asset, error) {
	out := map[string]*Asset{}
	err := fs.WalkDir(fsys, dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		ct, ok := types[path.Ext(p)]
		if !ok {
			return fmt.Errorf("asset %s has no known content type", p)
		}
		sum := sha256.Sum256(body)
		a := &Asset{body: body, ctype: ct, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
		if len(body) > 512 {
			var buf bytes.Buffer
			zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
			zw.Write(body)
			if err := zw.Close(); err != nil {
				return fmt.Errorf("asset %s: gzip: %w", p, err)
			}
			if buf.Len() < len(body)*9/10 {
				a.gz = buf.Bytes()
			}
		}
		out[strings.TrimPrefix(p, dir+"/")] = a
		return nil
	})
	return out, err
}

// Write serves a with validators, optional gzip and the given
// Content-Security-Policy.
func Write(w http.ResponseWriter, r *http.Request, a *Asset, csp string) {
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

// Size is the asset's length in bytes.
func (a *Asset) Size() int { return len(a.body) }

// Served is what the asset costs on the wire to a client that accepts
// gzip.
func (a *Asset) Served() int {
	if a.gz != nil {
		return len(a.gz)
	}
	return len(a.body)
}
