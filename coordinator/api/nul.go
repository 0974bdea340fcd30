package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"
)

// nulMessage is the message of the 422 for a string holding a NUL byte.
const nulMessage = `must not contain a NUL byte (\u0000): PostgreSQL text cannot store it`

// maxNULScan bounds the JSON body nulMiddleware reads to look for NUL
// bytes; larger bodies are refused by the operation's own size limit.
const maxNULScan = 1 << 20

// nulMiddleware refuses, with a 422 that names the field, any request
// whose query parameters, path or JSON body strings hold a NUL byte.
// PostgreSQL text cannot store one (SQLSTATE 22021), so without this check
// the request reached the database and failed there with a 500.
func (s *Server) nulMiddleware(ctx huma.Context, next func(huma.Context)) {
	if loc := nulInRequest(ctx); loc != "" {
		huma.WriteErr(s.api, ctx, http.StatusUnprocessableEntity, "validation failed", &huma.ErrorDetail{Location: loc, Message: nulMessage})
		return
	}
	next(ctx)
}

// nulInRequest returns the location of the first NUL byte in the request,
// or "".
func nulInRequest(ctx huma.Context) string {
	u := ctx.URL()
	if strings.IndexByte(u.Path, 0) >= 0 {
		return "path"
	}
	q := u.Query()
	names := make([]string, 0, len(q))
	for name := range q {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if strings.IndexByte(name, 0) >= 0 {
			return "query"
		}
		for _, v := range q[name] {
			if strings.IndexByte(v, 0) >= 0 {
				return "query." + name
			}
		}
	}
	ct := ctx.Header("Content-Type")
	if !strings.Contains(ct, "json") {
		return "" // uploads are bytes; other bodies are refused by huma
	}
	r := requestOf(ctx)
	if r == nil || r.Body == nil {
		return ""
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, maxNULScan))
	// Put the bytes back in front of whatever was not read.
	r.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(b), r.Body), r.Body}
	if err != nil || (!bytes.Contains(b, []byte(`\u0000`)) && bytes.IndexByte(b, 0) < 0) {
		return ""
	}
	var v any
	if json.Unmarshal(b, &v) != nil {
		return "" // not valid JSON: huma answers that
	}
	return nulPath("body", v)
}

// nulPath returns the path of the first string (or object key) under v
// holding a NUL byte, in huma's location syntax (body.labels.pool,
// body.configs[2].key), or "".
func nulPath(at string, v any) string {
	switch x := v.(type) {
	case string:
		if strings.IndexByte(x, 0) >= 0 {
			return at
		}
	case []any:
		for i, e := range x {
			if p := nulPath(fmt.Sprintf("%s[%d]", at, i), e); p != "" {
				return p
			}
		}
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if strings.IndexByte(k, 0) >= 0 {
				return at // the key itself
			}
			if p := nulPath(at+"."+k, x[k]); p != "" {
				return p
			}
		}
	}
	return ""
}

// requestOf returns the net/http request under ctx, nil for another
// adapter.
func requestOf(ctx huma.Context) (r *http.Request) {
	defer func() {
		if recover() != nil {
			r = nil
		}
	}()
	r, _ = humago.Unwrap(ctx)
	return r
}
