package api

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/lesfarm/lesfarm/coordinator/store"
)

// tokenWith creates a token named name with scopes and returns its secret.
func (e *env) tokenWith(name string, scopes ...string) string {
	e.t.Helper()
	secret, _, err := e.st.CreateAPITokenWith(context.Background(), &store.APITokenParams{Name: name, Scopes: scopes})
	if err != nil {
		e.t.Fatal(err)
	}
	return secret
}

// smokeSpecWith returns the built-in smoke suite's spec renamed to suite,
// its model fetched from url.
func (e *env) smokeSpecWith(suite, url string) json.RawMessage {
	e.t.Helper()
	resp := e.api.Get("/v1/suites/smoke")
	var su Suite
	if err := json.Unmarshal(resp.Body.Bytes(), &su); err != nil {
		e.t.Fatal(err)
	}
	su.Spec.Suite, su.Spec.Model.URL = suite, url
	b, err := json.Marshal(su.Spec)
	if err != nil {
		e.t.Fatal(err)
	}
	return b
}

// TestTokenScopesEnforced: each mutation needs its scope (issue 29,
// finding 8). A token without it gets 403 problem+json naming the scope it
// lacks; a token with it gets past authorization. Before scopes, every
// token could do everything.
func TestTokenScopesEnforced(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	suite := string(e.smokeSpecWith("mine", ""))
	tests := []struct {
		name, method, path, body string
		need                     string
	}{
		{"put suite", "PUT", "/v1/suites/mine", `{"spec":` + suite + `}`, "suites"},
		{"delete suite", "DELETE", "/v1/suites/mine", "", "suites"},
		{"trigger", "POST", "/v1/runs", `{"suite":"smoke"}`, "trigger"},
		{"schedule", "POST", "/v1/schedules", `{"name":"n","cron":"0 2 * * *","suite":"smoke"}`, "trigger"},
		{"push build", "POST", "/v1/builds", `{"id":"b1"}`, "builds"},
		{"upload artifact", "POST", "/v1/artifacts", "bytes", "builds"},
		{"drain device", "POST", "/v1/devices/d1/drain", `{}`, "admin"},
		{"egress", "PUT", "/v1/egress", `{"hosts":["models.lab"]}`, "admin"},
		{"gc", "POST", "/v1/artifacts/gc", `{"dry_run":true}`, "admin"},
		{"triage", "PATCH", "/v1/alerts/1", `{"status":"acknowledged"}`, "admin"},
	}
	others := map[string][]string{
		"suites": {"read", "trigger", "builds", "admin"}, "trigger": {"read", "suites", "builds", "admin"},
		"builds": {"read", "trigger", "admin"}, "admin": {"read", "trigger", "suites", "builds"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			without := e.tokenWith("without-"+tc.name, others[tc.need]...)
			resp := e.do(tc.method, tc.path, strings.NewReader(tc.body), "Authorization", "Bearer "+without, "Content-Type", "application/json")
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusForbidden {
				t.Fatalf("%s %s without the %s scope: %d %s, want 403", tc.method, tc.path, tc.need, resp.StatusCode, body)
			}
			p := decodeProblem(t, resp.Header.Get("Content-Type"), body)
			if !strings.Contains(p.Detail, "'"+tc.need+"'") || !strings.Contains(p.Detail, "--scope "+tc.need) {
				t.Fatalf("403 detail %q does not name the %s scope", p.Detail, tc.need)
			}
			with := e.tokenWith("with-"+tc.name, tc.need)
			resp = e.do(tc.method, tc.path, strings.NewReader(tc.body), "Authorization", "Bearer "+with, "Content-Type", "application/json")
			body, _ = io.ReadAll(resp.Body)
			if resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusUnauthorized {
				t.Fatalf("%s %s with the %s scope: %d %s", tc.method, tc.path, tc.need, resp.StatusCode, body)
			}
		})
	}
}

// TestReadsTakeAnyScope: when reads need a token, a read-only token reads
// (and sees fencing tokens) but cannot write.
func TestReadsTakeAnyScope(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(d *Deps) { d.RequireAuthForReads = true })
	for _, scope := range store.AllScopes {
		secret := e.tokenWith("only-"+scope, scope)
		if resp := e.do("GET", "/v1/runs", nil, "Authorization", "Bearer "+secret); resp.StatusCode != http.StatusOK {
			t.Errorf("GET /v1/runs with a %s token: %d", scope, resp.StatusCode)
		}
	}
	ro := e.tokenWith("dashboard", "read")
	if resp := e.do("POST", "/v1/runs", strings.NewReader(`{"suite":"smoke"}`), "Authorization", "Bearer "+ro, "Content-Type", "application/json"); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("trigger with a read-only token: %d, want 403", resp.StatusCode)
	}
}

// TestEveryMutationHasAScope: each operation that is not a read names its
// scopes in opScopes and in the OpenAPI document, so a new endpoint is a
// decision, not an accident (unlisted mutations need admin).
func TestEveryMutationHasAScope(t *testing.T) {
	t.Parallel()
	doc := openAPIDoc(t)
	paths, _ := doc["paths"].(map[string]any)
	for path, item := range paths {
		for method, raw := range item.(map[string]any) {
			op, ok := raw.(map[string]any)
			if !ok || method == "get" || method == "head" {
				continue
			}
			id, _ := op["operationId"].(string)
			if _, ok := opScopes[id]; !ok {
				t.Errorf("%s %s (%s) has no entry in opScopes", strings.ToUpper(method), path, id)
			}
			b, _ := json.Marshal(op["security"])
			if id != "validate-job" && !strings.Contains(string(b), `"bearer":["`) {
				t.Errorf("%s %s (%s): security %s names no scope", strings.ToUpper(method), path, id, b)
			}
		}
	}
}

// TestEgressRefusesUnlistedModelURL: a suite's model.url must name the
// coordinator's artifact host or an admin-listed host (issue 29, finding
// 8): PUT /v1/suites refuses another with 422 at body.spec.model.url; once
// an admin lists the host it is accepted, and when the host leaves the
// list again a trigger of the stored suite is refused with 422.
func TestEgressRefusesUnlistedModelURL(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(d *Deps) { d.ArtifactURL = "http://farm.lab:8080" })
	put := func(url string) (int, problem) {
		resp := e.do("PUT", "/v1/suites/ext", strings.NewReader(`{"spec":`+string(e.smokeSpecWith("ext", url))+`}`), e.authHeader()...)
		body, _ := io.ReadAll(resp.Body)
		var p problem
		if resp.StatusCode >= 400 {
			p = decodeProblem(t, resp.Header.Get("Content-Type"), body)
		}
		return resp.StatusCode, p
	}
	for _, tc := range []struct {
		url  string
		want int
	}{
		{"http://10.0.0.7:9200/model.gguf", http.StatusUnprocessableEntity}, // internal address
		{"http://farm.lab:9999/x", http.StatusUnprocessableEntity},          // the artifact host, another port
		{"http://user:pw@farm.lab:8080/x", http.StatusUnprocessableEntity},  // user information
		{"http://farm.lab:8080/v1/artifacts/x", http.StatusCreated},         // the artifact host
	} {
		code, p := put(tc.url)
		if code != tc.want {
			t.Fatalf("PUT suite with model.url %s: %d %+v, want %d", tc.url, code, p, tc.want)
		}
		if code == http.StatusUnprocessableEntity && !p.hasLocation("body.spec.model.url") {
			t.Fatalf("422 for %s does not name body.spec.model.url: %+v", tc.url, p)
		}
		if code == http.StatusCreated {
			e.do("DELETE", "/v1/suites/ext", nil, e.authHeader()...)
		}
	}
	setHosts := func(hosts string) {
		resp := e.do("PUT", "/v1/egress", strings.NewReader(`{"hosts":`+hosts+`}`), e.authHeader()...)
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(resp.Body)
			t.Fatalf("PUT /v1/egress %s: %d %s", hosts, resp.StatusCode, b)
		}
	}
	if resp := e.do("PUT", "/v1/egress", strings.NewReader(`{"hosts":["http://x/"]}`), e.authHeader()...); resp.StatusCode != http.StatusUnprocessableEntity {
		t.Fatalf("PUT /v1/egress with a URL for a host: %d, want 422", resp.StatusCode)
	}
	setHosts(`["Models.Lab"]`)
	if code, p := put("https://models.lab/q.gguf"); code != http.StatusCreated {
		t.Fatalf("model.url on a listed host: %d %+v", code, p)
	}
	setHosts(`[]`)
	resp := e.do("POST", "/v1/runs", strings.NewReader(`{"suite":"ext"}`), e.authHeader()...)
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusUnprocessableEntity {
		t.Fatalf("trigger of a suite whose host left the list: %d %s, want 422", resp.StatusCode, body)
	}
	if p := decodeProblem(t, resp.Header.Get("Content-Type"), body); !p.hasLocation("body.suite") || !strings.Contains(p.Errors[0].Message, "models.lab:443") {
		t.Fatalf("trigger 422 %+v does not name the suite and host", p)
	}
	var eg Egress
	if err := json.Unmarshal(e.api.Get("/v1/egress").Body.Bytes(), &eg); err != nil || eg.ArtifactHost != "farm.lab:8080" || len(eg.Hosts) != 0 {
		t.Fatalf("GET /v1/egress: %+v (%v)", eg, err)
	}
}

func (e *env) authHeader() []string {
	return []string{"Authorization", "Bearer " + e.token, "Content-Type", "application/json"}
}
