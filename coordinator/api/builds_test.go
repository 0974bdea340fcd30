package api

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/lesfarm/lesfarm/coordinator/artifact"
	"github.com/lesfarm/lesfarm/coordinator/builds/buildstest"
)

// withBigFiles gives the API an artifact store that takes executables.
func withBigFiles(t *testing.T) envOpt {
	files, err := artifact.New(artifact.Config{Dir: t.TempDir(), MaxSize: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	return func(d *Deps) { d.Files = files }
}

// upload stores b through POST /v1/artifacts and returns its sha256.
func (e *env) upload(b []byte) string {
	e.t.Helper()
	sum := sha256.Sum256(b)
	sha := hex.EncodeToString(sum[:])
	resp := e.do("POST", "/v1/artifacts?sha256="+sha, bytes.NewReader(b), "Authorization", "Bearer "+e.token, "Content-Type", "application/octet-stream")
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		e.t.Fatalf("upload: %d %s", resp.StatusCode, body)
	}
	return sha
}

func (e *env) uploadFile(path string) string {
	e.t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		e.t.Fatal(err)
	}
	return e.upload(b)
}

type pushExe = map[string]any

func exeOf(platform, sha string) pushExe { return pushExe{"platform": platform, "sha256": sha} }

// TestPushBuild: POST /v1/builds against real executables — 201 for a new
// build, 200 for the same again, and a one-line 422 for every refusal,
// with nothing stored.
func TestPushBuild(t *testing.T) {
	t.Parallel()
	set := buildstest.New(t)
	e := newEnv(t, withBigFiles(t))
	host := buildstest.Host()
	lf := map[string]string{}
	for pl, path := range set.Lesfarm {
		lf[pl] = e.uploadFile(path)
	}
	clean, dirty, other, notGo := e.uploadFile(set.Clean), e.uploadFile(set.Dirty), e.uploadFile(set.Other), e.uploadFile(set.NotGo)
	whole, err := os.ReadFile(set.Lesfarm[host])
	if err != nil {
		t.Fatal(err)
	}
	truncated := e.upload(whole[:len(whole)/3])
	three := []pushExe{exeOf("android/arm64", lf["android/arm64"]), exeOf("linux/arm64", lf["linux/arm64"]), exeOf(host, lf[host])}

	resp := e.api.Post("/v1/builds", e.auth(), map[string]any{"id": "ci-4812", "executables": three})
	if resp.Code != http.StatusCreated || resp.Header().Get("Location") != "/v1/builds/ci-4812" {
		t.Fatalf("push: %d %s", resp.Code, resp.Body)
	}
	var b Build
	if err := json.Unmarshal(resp.Body.Bytes(), &b); err != nil {
		t.Fatal(err)
	}
	if b.ID != "ci-4812" || b.Lineage != "main" || b.Position != 1 || b.Kind != "exec" || b.PushedBy != "test" || b.Dirty ||
		len(b.Executables) != 3 || b.Executables[0].Platform != "android/arm64" || b.Executables[0].SHA256 != lf["android/arm64"] ||
		b.Executables[0].Size <= 0 || !strings.HasPrefix(b.Executables[0].GoVersion, "go") || b.Executables[0].Settings["GOOS"] != "android" {
		t.Fatalf("pushed build %+v", b)
	}
	if resp := e.api.Post("/v1/builds", e.auth(), map[string]any{"id": "ci-4812", "executables": three}); resp.Code != http.StatusOK {
		t.Fatalf("same build again: %d %s; want 200", resp.Code, resp.Body)
	}
	// A stamped build: the short git sha is extended by the revision; a
	// dirty one is accepted and flagged.
	resp = e.api.Post("/v1/builds", e.auth(), map[string]any{"id": "ci-4813", "git_sha": set.Revision[:7], "executables": []pushExe{exeOf(host, clean)}})
	if resp.Code != http.StatusCreated || !strings.Contains(resp.Body.String(), `"git_sha":"`+set.Revision+`"`) || !strings.Contains(resp.Body.String(), `"dirty":false`) {
		t.Fatalf("clean push: %d %s", resp.Code, resp.Body)
	}
	resp = e.api.Post("/v1/builds", e.auth(), map[string]any{"id": "ci-4814-dirty", "executables": []pushExe{exeOf(host, dirty)}})
	if resp.Code != http.StatusCreated || !strings.Contains(resp.Body.String(), `"dirty":true`) {
		t.Fatalf("dirty push: %d %s", resp.Code, resp.Body)
	}

	tests := []struct {
		name string
		body map[string]any
		want string
	}{
		{"id taken by other content", map[string]any{"id": "ci-4812", "executables": []pushExe{exeOf(host, clean)}},
			`build "ci-4812" is already registered with other content`},
		{"not a Go file", map[string]any{"id": "x1", "executables": []pushExe{exeOf(host, notGo)}},
			fmt.Sprintf("executable for %s (%s): not a Go executable", host, notGo[:12])},
		{"truncated upload", map[string]any{"id": "x2", "executables": []pushExe{exeOf(host, truncated)}}, "not a Go executable"},
		{"another module", map[string]any{"id": "x3", "executables": []pushExe{exeOf(host, other)}},
			"a Go executable of module example.com/other (package example.com/other), not of github.com/lesfarm/lesfarm"},
		{"wrong platform", map[string]any{"id": "x4", "executables": []pushExe{exeOf("linux/riscv64", lf["linux/arm64"])}},
			"executable for linux/riscv64 is a linux/arm64 binary"},
		{"git sha contradicts vcs.revision", map[string]any{"id": "x5", "git_sha": "abcdef1", "executables": []pushExe{exeOf(host, clean)}},
			"git sha abcdef1 contradicts the executables' vcs.revision " + set.Revision},
		{"never uploaded", map[string]any{"id": "x6", "executables": []pushExe{exeOf(host, strings.Repeat("0", 64))}}, "no such artifact"},
		{"two for one platform", map[string]any{"id": "x7", "executables": []pushExe{exeOf(host, clean), exeOf(host, dirty)}}, "two executables for platform " + host},
		{"embedded prefix", map[string]any{"id": "embedded-0123", "executables": []pushExe{exeOf(host, clean)}}, `build ids starting with "embedded-" are reserved`},
		{"after unknown", map[string]any{"id": "x8", "after": "ci-9", "executables": []pushExe{exeOf(host, clean)}}, `--after build "ci-9" is not registered`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp := e.api.Post("/v1/builds", e.auth(), tc.body)
			p := decodeProblem(t, resp.Header().Get("Content-Type"), resp.Body.Bytes())
			if resp.Code != http.StatusUnprocessableEntity || !strings.Contains(p.Detail, tc.want) || strings.Contains(p.Detail, "\n") {
				t.Fatalf("%d %q; want 422 with a one-line detail containing %q", resp.Code, p.Detail, tc.want)
			}
			if id := tc.body["id"].(string); id != "ci-4812" {
				if resp := e.api.Get("/v1/builds/" + id); resp.Code != http.StatusNotFound {
					t.Fatalf("refused build %s stored: %d", id, resp.Code)
				}
			}
		})
	}
	if resp := e.api.Post("/v1/builds", map[string]any{"id": "x9", "executables": three}); resp.Code != http.StatusUnauthorized {
		t.Fatalf("push without a token: %d", resp.Code)
	}
}

// TestBuildsReadAndTrigger: list and get builds; a trigger of a build
// that is not registered is a 422 naming the nearest ids, and an empty
// build (each device's embedded one) is still accepted.
func TestBuildsReadAndTrigger(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	buildstest.Register(t, e.st, "ci-4790", "ci-4811", "ci-4812")
	resp := e.api.Get("/v1/builds?lineage=main&limit=2")
	var list struct{ Items []Build }
	if err := json.Unmarshal(resp.Body.Bytes(), &list); err != nil || resp.Code != http.StatusOK || len(list.Items) != 2 ||
		list.Items[0].ID != "ci-4812" || list.Items[1].ID != "ci-4811" || len(list.Items[0].Executables) != 1 {
		t.Fatalf("list: %d %s", resp.Code, resp.Body)
	}
	if resp := e.api.Get("/v1/builds?lineage=release-9"); resp.Code != http.StatusOK || !strings.Contains(resp.Body.String(), `"items":[]`) {
		t.Fatalf("empty list: %d %s", resp.Code, resp.Body)
	}
	resp = e.api.Get("/v1/builds/ci-481")
	if p := decodeProblem(t, resp.Header().Get("Content-Type"), resp.Body.Bytes()); resp.Code != http.StatusNotFound ||
		p.Detail != `build "ci-481" is not registered; nearest: ci-4812, ci-4811` {
		t.Fatalf("get unknown: %d %q", resp.Code, p.Detail)
	}

	resp = e.api.Post("/v1/runs", e.auth(), map[string]any{"suite": "smoke", "build": "ci-481"})
	p := decodeProblem(t, resp.Header().Get("Content-Type"), resp.Body.Bytes())
	if resp.Code != http.StatusUnprocessableEntity || p.Detail != `build "ci-481" is not registered; nearest: ci-4812, ci-4811` || !p.hasLocation("body.build") {
		t.Fatalf("trigger of an unknown build: %d %+v", resp.Code, p)
	}
	resp = e.api.Post("/v1/runs", e.auth(), map[string]any{"suite": "smoke", "build": "zzz"})
	if p := decodeProblem(t, resp.Header().Get("Content-Type"), resp.Body.Bytes()); resp.Code != http.StatusUnprocessableEntity ||
		p.Detail != `build "zzz" is not registered; push it first: lesfarm build push zzz FILE...` {
		t.Fatalf("trigger of a build with no near id: %d %q", resp.Code, p.Detail)
	}
	if runs, err := e.st.RunsByIDs(t.Context(), []int64{1}); err != nil || len(runs) != 0 {
		t.Fatalf("a refused trigger created runs: %v %v", runs, err)
	}
	for _, build := range []string{"ci-4812", ""} {
		if resp := e.api.Post("/v1/runs", e.auth(), map[string]any{"suite": "smoke", "build": build}); resp.Code != http.StatusCreated {
			t.Fatalf("trigger of build %q: %d %s", build, resp.Code, resp.Body)
		}
	}
	resp = e.api.Get("/v1/builds/ci-4812")
	if resp.Code != http.StatusOK || !strings.Contains(resp.Body.String(), `"runs":1`) {
		t.Fatalf("get: %d %s", resp.Code, resp.Body)
	}
}
