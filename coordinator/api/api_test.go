package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/danielgtaylor/huma/v2/humatest"

	"github.com/lesfarm/lesfarm/coordinator/artifact"
	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/internal/testenv"
	"github.com/lesfarm/lesfarm/jobs"
)

func TestMain(m *testing.M) { os.Exit(testenv.Run(m)) }

// env is one API on a fresh migrated database.
type env struct {
	t     *testing.T
	st    *store.Store
	files *artifact.Files
	srv   *httptest.Server
	api   humatest.TestAPI
	token string
}

type envOpt func(*Deps)

func newEnv(t *testing.T, opts ...envOpt) *env {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, testenv.MigratedPostgresURL(t), store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	files, err := artifact.New(artifact.Config{Dir: t.TempDir(), MaxSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	d := Deps{Store: st, Files: files, Logger: slog.New(slog.DiscardHandler), WaitPoll: 50 * time.Millisecond}
	for _, o := range opts {
		o(&d)
	}
	h, hapi, err := New(d)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	secret, _, err := st.CreateAPIToken(ctx, "test")
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, st: st, files: files, srv: srv, api: humatest.Wrap(t, hapi), token: secret}
}

func (e *env) auth() string { return "Authorization: Bearer " + e.token }

// do sends a real HTTP request to the test server.
func (e *env) do(method, path string, body io.Reader, hdr ...string) *http.Response {
	e.t.Helper()
	req, err := http.NewRequest(method, e.srv.URL+path, body)
	if err != nil {
		e.t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// problem is an RFC 9457 document as huma writes it.
type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Errors []struct {
		Message  string `json:"message"`
		Location string `json:"location"`
	} `json:"errors"`
}

func decodeProblem(t *testing.T, ct string, body []byte) problem {
	t.Helper()
	if !strings.HasPrefix(ct, "application/problem+json") {
		t.Fatalf("content type %q, want application/problem+json; body %s", ct, body)
	}
	var p problem
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatalf("problem body: %v: %s", err, body)
	}
	return p
}

func (p problem) hasLocation(loc string) bool {
	for _, e := range p.Errors {
		if e.Location == loc {
			return true
		}
	}
	return false
}

func TestAuth(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	body := map[string]any{"name": "n1", "cron": "0 2 * * *", "suite": "smoke"}
	tests := []struct {
		name   string
		header []any
		want   int
	}{
		{"no token", nil, http.StatusUnauthorized},
		{"not bearer", []any{"Authorization: Basic Zm9vOmJhcg=="}, http.StatusUnauthorized},
		{"wrong token", []any{"Authorization: Bearer lft_nope"}, http.StatusUnauthorized},
		{"valid token", []any{e.auth()}, http.StatusCreated},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp := e.api.Post("/v1/schedules", append(tc.header, body)...)
			if resp.Code != tc.want {
				t.Fatalf("status %d, want %d: %s", resp.Code, tc.want, resp.Body)
			}
			if tc.want == http.StatusUnauthorized {
				decodeProblem(t, resp.Header().Get("Content-Type"), resp.Body.Bytes())
				if !strings.HasPrefix(resp.Header().Get("WWW-Authenticate"), "Bearer") {
					t.Fatalf("WWW-Authenticate = %q", resp.Header().Get("WWW-Authenticate"))
				}
			}
		})
	}
	// Reads are open by default.
	if resp := e.api.Get("/v1/schedules"); resp.Code != http.StatusOK {
		t.Fatalf("open read: %d %s", resp.Code, resp.Body)
	}
	// A revoked token stops working.
	toks, _ := e.st.ListAPITokens(context.Background())
	if err := e.st.RevokeAPIToken(context.Background(), toks[0].ID); err != nil {
		t.Fatal(err)
	}
	if resp := e.api.Delete("/v1/schedules/1", e.auth()); resp.Code != http.StatusUnauthorized {
		t.Fatalf("revoked token: %d", resp.Code)
	}
}

func TestReadsNeedTokenWhenConfigured(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(d *Deps) { d.RequireAuthForReads = true })
	if resp := e.api.Get("/v1/schedules"); resp.Code != http.StatusUnauthorized {
		t.Fatalf("read without token: %d", resp.Code)
	}
	if resp := e.api.Get("/v1/schedules", e.auth()); resp.Code != http.StatusOK {
		t.Fatalf("read with token: %d", resp.Code)
	}
	if resp := e.api.Get("/healthz"); resp.Code != http.StatusOK {
		t.Fatalf("healthz must stay public: %d", resp.Code)
	}
}

func TestScheduleValidationLocations(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tests := []struct {
		name string
		body map[string]any
		loc  string
	}{
		{"bad cron", map[string]any{"name": "a", "cron": "0 25 * * *", "suite": "smoke"}, "body.cron"},
		{"bad time zone", map[string]any{"name": "a", "cron": "0 2 * * *", "timezone": "Mars/Base", "suite": "smoke"}, "body.timezone"},
		{"missing suite", map[string]any{"name": "a", "cron": "0 2 * * *"}, "body.suite"},
		{"bad name", map[string]any{"name": "a b", "cron": "0 2 * * *", "suite": "smoke"}, "body.name"},
		{"unknown selector field", map[string]any{"name": "a", "cron": "0 2 * * *", "suite": "smoke", "devices": map[string]any{"platfrom": "android"}}, "body.devices.platfrom"}, //nolint:misspell // the typo is the test
		{"bad selector value", map[string]any{"name": "a", "cron": "0 2 * * *", "suite": "smoke", "devices": map[string]any{"platform": "windows"}}, "body.devices.platform"},
		{"unknown suite", map[string]any{"name": "a", "cron": "0 2 * * *", "suite": "nope"}, "body.suite"},
		{"override not applicable", map[string]any{"name": "a", "cron": "0 2 * * *", "suite": "smoke", "override": map[string]any{"repetitions": -3}}, "body.override.repetitions"},
		{"negative catchup", map[string]any{"name": "a", "cron": "0 2 * * *", "suite": "smoke", "catchup": "-5m"}, "body.catchup"},
		{"catchup over a week", map[string]any{"name": "a", "cron": "0 2 * * *", "suite": "smoke", "catchup": "169h"}, "body.catchup"},
		{"catchup as nanoseconds", map[string]any{"name": "a", "cron": "0 2 * * *", "suite": "smoke", "catchup": 3600000000000}, "body.catchup"},
		{"negative deprecated catchup_seconds", map[string]any{"name": "a", "cron": "0 2 * * *", "suite": "smoke", "catchup_seconds": -1}, "body.catchup_seconds"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp := e.api.Post("/v1/schedules", e.auth(), tc.body)
			if resp.Code != http.StatusUnprocessableEntity {
				t.Fatalf("status %d: %s", resp.Code, resp.Body)
			}
			p := decodeProblem(t, resp.Header().Get("Content-Type"), resp.Body.Bytes())
			if !p.hasLocation(tc.loc) {
				t.Fatalf("no error at %s: %s", tc.loc, resp.Body)
			}
		})
	}
}

func TestSchedulesCRUDAndPagination(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var ids []int64
	for i := range 5 {
		resp := e.api.Post("/v1/schedules", e.auth(), map[string]any{
			"name": fmt.Sprintf("s%d", i), "cron": "@daily", "suite": "smoke", "build": "nightly-{date}",
			"devices": map[string]any{"platform": "android"},
		})
		if resp.Code != http.StatusCreated {
			t.Fatalf("create: %d %s", resp.Code, resp.Body)
		}
		var sc Schedule
		json.Unmarshal(resp.Body.Bytes(), &sc)
		if sc.NextFireAt.Before(time.Now()) || sc.Timezone != "UTC" || !sc.Enabled {
			t.Fatalf("created %+v", sc)
		}
		ids = append(ids, sc.ID)
	}
	if resp := e.api.Post("/v1/schedules", e.auth(), map[string]any{"name": "s0", "cron": "@daily", "suite": "smoke"}); resp.Code != http.StatusConflict {
		t.Fatalf("duplicate name: %d", resp.Code)
	}
	// Page through with limit 2: 2 + 2 + 1.
	var seen []int64
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatal("pagination does not end")
		}
		resp := e.api.Get("/v1/schedules?limit=2" + cursor)
		var page struct {
			Items      []Schedule `json:"items"`
			NextCursor int64      `json:"next_cursor"`
		}
		json.Unmarshal(resp.Body.Bytes(), &page)
		for _, s := range page.Items {
			seen = append(seen, s.ID)
		}
		if page.NextCursor == 0 {
			break
		}
		cursor = fmt.Sprintf("&cursor=%d", page.NextCursor)
	}
	if fmt.Sprint(seen) != fmt.Sprint(ids) {
		t.Fatalf("paged ids %v, want %v", seen, ids)
	}
	if resp := e.api.Get("/v1/schedules?limit=0"); resp.Code != http.StatusUnprocessableEntity ||
		!decodeProblem(t, resp.Header().Get("Content-Type"), resp.Body.Bytes()).hasLocation("query.limit") {
		t.Fatalf("limit=0: %d %s", resp.Code, resp.Body)
	}
	// Update, then delete.
	resp := e.api.Put(fmt.Sprintf("/v1/schedules/%d", ids[0]), e.auth(), map[string]any{"name": "renamed", "cron": "0 3 * * *", "suite": "smoke", "enabled": false})
	if resp.Code != http.StatusOK || !strings.Contains(resp.Body.String(), `"renamed"`) {
		t.Fatalf("update: %d %s", resp.Code, resp.Body)
	}
	if resp := e.api.Delete(fmt.Sprintf("/v1/schedules/%d", ids[0]), e.auth()); resp.Code != http.StatusNoContent {
		t.Fatalf("delete: %d", resp.Code)
	}
	if resp := e.api.Get(fmt.Sprintf("/v1/schedules/%d", ids[0])); resp.Code != http.StatusNotFound {
		t.Fatalf("get deleted: %d", resp.Code)
	}
	if resp := e.api.Get(fmt.Sprintf("/v1/schedules/%d/firings", ids[1])); resp.Code != http.StatusOK || !strings.Contains(resp.Body.String(), `"items":[]`) {
		t.Fatalf("firings: %d %s", resp.Code, resp.Body)
	}
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func TestArtifactUploadAndRangeResume(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	data := make([]byte, 300_000)
	for i := range data {
		data[i] = byte(i * 7)
	}
	sha := sum(data)
	// Unauthenticated upload is refused before reading the body.
	if resp := e.do("POST", "/v1/artifacts", bytes.NewReader(data)); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("upload without token: %d", resp.StatusCode)
	}
	resp := e.do("POST", "/v1/artifacts?name=model.gguf&sha256="+sha, bytes.NewReader(data),
		"Authorization", "Bearer "+e.token, "Content-Type", "application/octet-stream")
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("upload: %d %s", resp.StatusCode, body)
	}
	var a Artifact
	json.Unmarshal(body, &a)
	if a.SHA256 != sha || a.Size != int64(len(data)) || a.Name != "model.gguf" || resp.Header.Get("Location") != "/v1/artifacts/"+sha {
		t.Fatalf("artifact %+v location %q", a, resp.Header.Get("Location"))
	}
	// Same content again: 200, deduplicated.
	if resp := e.do("POST", "/v1/artifacts", bytes.NewReader(data), "Authorization", "Bearer "+e.token); resp.StatusCode != http.StatusOK {
		t.Fatalf("re-upload: %d", resp.StatusCode)
	}

	// Download the first 100k, "lose the connection", resume with Range.
	resp = e.do("GET", "/v1/artifacts/"+sha, nil)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Accept-Ranges") != "bytes" || resp.Header.Get("ETag") != `"`+sha+`"` {
		t.Fatalf("download: %d %v", resp.StatusCode, resp.Header)
	}
	part := make([]byte, 100_000)
	if _, err := io.ReadFull(resp.Body, part); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	resp = e.do("GET", "/v1/artifacts/"+sha, nil, "Range", fmt.Sprintf("bytes=%d-", len(part)), "If-Range", `"`+sha+`"`)
	if resp.StatusCode != http.StatusPartialContent {
		t.Fatalf("resume: %d", resp.StatusCode)
	}
	if cr := resp.Header.Get("Content-Range"); cr != fmt.Sprintf("bytes 100000-%d/%d", len(data)-1, len(data)) {
		t.Fatalf("Content-Range = %q", cr)
	}
	rest, _ := io.ReadAll(resp.Body)
	if got := slices.Concat(part, rest); !bytes.Equal(got, data) {
		t.Fatalf("resumed download differs (%d bytes)", len(got))
	}
	// A range past the end is 416.
	if resp := e.do("GET", "/v1/artifacts/"+sha, nil, "Range", "bytes=400000-"); resp.StatusCode != http.StatusRequestedRangeNotSatisfiable {
		t.Fatalf("bad range: %d", resp.StatusCode)
	}
	// HEAD gives the size without the body.
	if resp := e.do("HEAD", "/v1/artifacts/"+sha, nil); resp.StatusCode != http.StatusOK || resp.ContentLength != int64(len(data)) {
		t.Fatalf("HEAD: %d length %d", resp.StatusCode, resp.ContentLength)
	}
	// Unknown and malformed digests.
	if resp := e.do("GET", "/v1/artifacts/"+strings.Repeat("0", 64), nil); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("unknown: %d", resp.StatusCode)
	}
	resp = e.do("GET", "/v1/artifacts/xyz", nil)
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusUnprocessableEntity || !decodeProblem(t, resp.Header.Get("Content-Type"), b).hasLocation("path.sha256") {
		t.Fatalf("malformed: %d %s", resp.StatusCode, b)
	}
}

func TestArtifactUploadRejections(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	auth := []string{"Authorization", "Bearer " + e.token}
	big := make([]byte, 1<<20+1) // one byte over the test cap
	// Declared too large: 413 before reading.
	if resp := e.do("POST", "/v1/artifacts", bytes.NewReader(big), auth...); resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("over cap: %d", resp.StatusCode)
	}
	// Chunked (no Content-Length) and too large: 413 after the cap.
	resp := e.do("POST", "/v1/artifacts", io.MultiReader(bytes.NewReader(big)), auth...)
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("chunked over cap: %d", resp.StatusCode)
	}
	// Wrong digest: 422 at query.sha256, nothing stored.
	resp = e.do("POST", "/v1/artifacts?sha256="+strings.Repeat("a", 64), strings.NewReader("hello"), auth...)
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusUnprocessableEntity || !decodeProblem(t, resp.Header.Get("Content-Type"), b).hasLocation("query.sha256") {
		t.Fatalf("digest mismatch: %d %s", resp.StatusCode, b)
	}
	if list, _ := e.files.List(); len(list) != 0 {
		t.Fatalf("rejected uploads stored files: %v", list)
	}
}

func TestArtifactGC(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	put := func(s string) string {
		resp := e.do("POST", "/v1/artifacts", strings.NewReader(s), "Authorization", "Bearer "+e.token)
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("upload: %d", resp.StatusCode)
		}
		return sum([]byte(s))
	}
	old, pinned, fresh, bySuite, byRun := put("old"), put("pinned"), put("fresh"), put("by-suite"), put("by-run")
	// A suite references one artifact, a queued run's job another.
	withModel := func(sha string, size int) json.RawMessage {
		resp := e.api.Get("/v1/suites/smoke")
		var su Suite
		json.Unmarshal(resp.Body.Bytes(), &su)
		su.Spec.Model.SHA256, su.Spec.Model.Size = sha, jobs.ByteSize(size)
		b, _ := json.Marshal(su.Spec)
		return b
	}
	suiteSpec := strings.Replace(string(withModel(bySuite, len("by-suite"))), `"suite":"smoke"`, `"suite":"refs"`, 1)
	if resp := e.api.Put("/v1/suites/refs", e.auth(), map[string]any{"spec": json.RawMessage(suiteSpec)}); resp.Code != http.StatusCreated {
		t.Fatalf("suite: %d %s", resp.Code, resp.Body)
	}
	override := map[string]any{"sha256": byRun, "size": len("by-run")}
	if resp := e.api.Post("/v1/runs", e.auth(), map[string]any{"suite": "smoke", "override": map[string]any{"model": override}}); resp.Code != http.StatusCreated {
		t.Fatalf("run: %d %s", resp.Code, resp.Body)
	}
	e.st.Pool().Exec(ctx, `UPDATE artifacts SET last_accessed_at = now() - interval '2 days' WHERE sha256 = ANY($1)`, []string{old, pinned, bySuite, byRun})
	if resp := e.api.Put("/v1/artifacts/"+pinned+"/pin", e.auth(), map[string]any{"pinned": true}); resp.Code != http.StatusOK || !strings.Contains(resp.Body.String(), `"pinned":true`) {
		t.Fatalf("pin: %d %s", resp.Code, resp.Body)
	}
	resp := e.api.Post("/v1/artifacts/gc", e.auth(), map[string]any{"grace": "24h", "dry_run": true})
	if resp.Code != http.StatusOK || !strings.Contains(resp.Body.String(), old) {
		t.Fatalf("dry run: %d %s", resp.Code, resp.Body)
	}
	if _, err := e.files.Stat(old); err != nil {
		t.Fatalf("dry run removed the file: %v", err)
	}
	// grace_seconds is the deprecated spelling of grace; it still works.
	resp = e.api.Post("/v1/artifacts/gc", e.auth(), map[string]any{"grace_seconds": 86400})
	var rep GCReport
	json.Unmarshal(resp.Body.Bytes(), &rep)
	if fmt.Sprint(rep.Removed) != fmt.Sprint([]string{old}) {
		t.Fatalf("removed %v, want only %s", rep.Removed, old)
	}
	if _, err := e.files.Stat(old); err == nil {
		t.Fatal("old artifact file still present")
	}
	for _, s := range []string{pinned, fresh, bySuite, byRun} {
		if _, err := e.files.Stat(s); err != nil {
			t.Fatalf("kept artifact %s lost: %v", s, err)
		}
	}
	// Explicit delete.
	if resp := e.api.Delete("/v1/artifacts/"+fresh, e.auth()); resp.Code != http.StatusNoContent {
		t.Fatalf("delete: %d %s", resp.Code, resp.Body)
	}
	if _, err := e.files.Stat(fresh); err == nil {
		t.Fatal("deleted artifact's file still present")
	}
	if resp := e.api.Delete("/v1/artifacts/"+fresh, e.auth()); resp.Code != http.StatusNotFound {
		t.Fatalf("second delete: %d", resp.Code)
	}
}

func TestOpenAPIServedAndValid(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	resp := e.do("GET", "/openapi.json", nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("openapi.json: %d", resp.StatusCode)
	}
	raw, _ := io.ReadAll(resp.Body)
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("openapi.json is not JSON: %v", err)
	}
	if v, _ := doc["openapi"].(string); !strings.HasPrefix(v, "3.1") {
		t.Fatalf("openapi version %q", v)
	}
	paths, _ := doc["paths"].(map[string]any)
	for _, p := range []string{"/v1/artifacts", "/v1/artifacts/{sha256}", "/v1/schedules", "/healthz", "/readyz"} {
		if paths[p] == nil {
			t.Errorf("path %s missing from the document", p)
		}
	}
	// Every operation has a unique id, responses, and a parameter for each
	// path template variable; every $ref resolves.
	ids := map[string]bool{}
	for p, item := range paths {
		for method, op := range item.(map[string]any) {
			o := op.(map[string]any)
			id, _ := o["operationId"].(string)
			if id == "" || ids[id] {
				t.Errorf("%s %s: missing or duplicate operationId %q", method, p, id)
			}
			ids[id] = true
			if r, _ := o["responses"].(map[string]any); len(r) == 0 {
				t.Errorf("%s %s: no responses", method, p)
			}
			declared := map[string]bool{}
			params, _ := o["parameters"].([]any)
			for _, prm := range params {
				if m := prm.(map[string]any); m["in"] == "path" {
					declared[m["name"].(string)] = true
				}
			}
			for _, seg := range strings.Split(p, "/") {
				if name, ok := strings.CutPrefix(seg, "{"); ok && !declared[strings.TrimSuffix(name, "}")] {
					t.Errorf("%s %s: path parameter %s not declared", method, p, seg)
				}
			}
		}
	}
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if ref, ok := v["$ref"].(string); ok {
				if !resolves(doc, ref) {
					t.Errorf("dangling $ref %s", ref)
				}
			}
			for _, c := range v {
				walk(c)
			}
		case []any:
			for _, c := range v {
				walk(c)
			}
		}
	}
	walk(doc)
	if resp := e.do("GET", "/docs", nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("/docs: %d", resp.StatusCode)
	}
	if resp := e.do("GET", "/readyz", nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("/readyz: %d", resp.StatusCode)
	}
	if resp := e.do("GET", "/metrics", nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %d", resp.StatusCode)
	} else if b, _ := io.ReadAll(resp.Body); !bytes.Contains(b, []byte("lesfarm_api_requests_total")) {
		t.Fatal("/metrics lacks the API request counter")
	}
	if resp := e.do("GET", "/readyz", nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("/readyz: %d", resp.StatusCode)
	}
}

func resolves(doc map[string]any, ref string) bool {
	path, ok := strings.CutPrefix(ref, "#/")
	if !ok {
		return false
	}
	var cur any = doc
	for _, part := range strings.Split(path, "/") {
		m, ok := cur.(map[string]any)
		if !ok {
			return false
		}
		if cur, ok = m[part]; !ok {
			return false
		}
	}
	return true
}
