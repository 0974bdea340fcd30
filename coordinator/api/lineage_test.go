package api

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/lesfarm/lesfarm/coordinator/builds/buildstest"
	"github.com/lesfarm/lesfarm/coordinator/store"
)

// TestRunLineageAPI: triggers take an optional lineage (default main) that
// the trigger, its runs, the run detail and the runs filter report; a bad
// lineage is a problem+json 422 located at body.lineage, for runs and
// schedules alike; the OpenAPI document states the store's rule.
func TestRunLineageAPI(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	addDevice(t, e.st, "p1", "android", "Pixel 8", nil)
	addDevice(t, e.st, "p2", "android", "Pixel 8", nil)
	buildstest.Register(t, e.st, "b1", "rc-1")

	for _, bad := range []string{"release/1", "", "-rc", "a b", strings.Repeat("x", store.MaxLineageLen+1)} {
		resp := e.api.Post("/v1/runs", e.auth(), map[string]any{"suite": "smoke", "build": "b1", "lineage": bad})
		if resp.Code != http.StatusUnprocessableEntity || !decodeProblem(t, resp.Header().Get("Content-Type"), resp.Body.Bytes()).hasLocation("body.lineage") {
			t.Fatalf("trigger with lineage %q: %d %s", bad, resp.Code, resp.Body)
		}
		resp = e.api.Post("/v1/schedules", e.auth(), map[string]any{"name": "n", "cron": "@daily", "suite": "smoke", "lineage": bad})
		if resp.Code != http.StatusUnprocessableEntity || !decodeProblem(t, resp.Header().Get("Content-Type"), resp.Body.Bytes()).hasLocation("body.lineage") {
			t.Fatalf("schedule with lineage %q: %d %s", bad, resp.Code, resp.Body)
		}
	}
	if n, _ := e.st.ListRuns(t.Context(), &store.ListRunsParams{}); len(n) != 0 {
		t.Fatalf("refused triggers created %d runs", len(n))
	}

	resp := e.api.Post("/v1/runs", e.auth(), map[string]any{"suite": "smoke", "build": "rc-1", "lineage": "release-1", "fanout": true})
	if resp.Code != http.StatusCreated {
		t.Fatalf("trigger: %d %s", resp.Code, resp.Body)
	}
	var set RunSet
	json.Unmarshal(resp.Body.Bytes(), &set)
	if set.Trigger.Lineage != "release-1" || len(set.Runs) != 2 || set.Runs[0].Lineage != "release-1" || set.Runs[1].Lineage != "release-1" {
		t.Fatalf("release trigger: %s", resp.Body)
	}
	resp = e.api.Post("/v1/runs", e.auth(), map[string]any{"suite": "smoke", "build": "b1"})
	json.Unmarshal(resp.Body.Bytes(), &set)
	if resp.Code != http.StatusCreated || set.Trigger.Lineage != "main" || set.Runs[0].Lineage != "main" {
		t.Fatalf("trigger without lineage: %d %s", resp.Code, resp.Body)
	}
	for _, tc := range []struct{ q, want string }{{"?lineage=release-1", "[2 1]"}, {"?lineage=main", "[3]"}, {"?lineage=release-2", "[]"}, {"", "[3 2 1]"}} {
		resp := e.api.Get("/v1/runs" + tc.q)
		var p struct {
			Items []Run `json:"items"`
		}
		json.Unmarshal(resp.Body.Bytes(), &p)
		ids := []int64{}
		for _, r := range p.Items {
			ids = append(ids, r.ID)
		}
		if resp.Code != http.StatusOK || fmt.Sprint(ids) != tc.want {
			t.Errorf("GET /v1/runs%s: %d %v, want %s", tc.q, resp.Code, ids, tc.want)
		}
	}
	if resp := e.api.Get("/v1/runs/1"); resp.Code != http.StatusOK || !strings.Contains(resp.Body.String(), `"lineage":"release-1"`) {
		t.Fatalf("run detail: %d %s", resp.Code, resp.Body)
	}

	// Schedules: default main, a release lineage, and a replace.
	var sc Schedule
	resp = e.api.Post("/v1/schedules", e.auth(), map[string]any{"name": "n-main", "cron": "@daily", "suite": "smoke"})
	json.Unmarshal(resp.Body.Bytes(), &sc)
	if resp.Code != http.StatusCreated || sc.Lineage != "main" {
		t.Fatalf("schedule without lineage: %d %s", resp.Code, resp.Body)
	}
	resp = e.api.Post("/v1/schedules", e.auth(), map[string]any{"name": "n-rel", "cron": "@daily", "suite": "smoke", "lineage": "release-1"})
	json.Unmarshal(resp.Body.Bytes(), &sc)
	if resp.Code != http.StatusCreated || sc.Lineage != "release-1" {
		t.Fatalf("release schedule: %d %s", resp.Code, resp.Body)
	}
	resp = e.api.Put(fmt.Sprintf("/v1/schedules/%d", sc.ID), e.auth(), map[string]any{"name": "n-rel", "cron": "@daily", "suite": "smoke", "lineage": "release-2"})
	if resp.Code != http.StatusOK || !strings.Contains(resp.Body.String(), `"lineage":"release-2"`) {
		t.Fatalf("replace schedule: %d %s", resp.Code, resp.Body)
	}

	// The published contract is the store's rule.
	doc := e.do("GET", "/openapi.json", nil)
	raw, _ := io.ReadAll(doc.Body)
	var api struct {
		Paths      map[string]map[string]struct{ Parameters []struct{ Name, In string } }
		Components struct {
			Schemas map[string]struct {
				Properties map[string]struct {
					Pattern   string `json:"pattern"`
					MaxLength int    `json:"maxLength"`
					Default   any    `json:"default"`
				}
			}
		}
	}
	if err := json.Unmarshal(raw, &api); err != nil {
		t.Fatal(err)
	}
	for _, schema := range []string{"TriggerBody", "ScheduleBody"} {
		l := api.Components.Schemas[schema].Properties["lineage"]
		if l.Pattern != store.LineagePattern || l.MaxLength != store.MaxLineageLen || l.Default != store.DefaultLineage {
			t.Errorf("%s.lineage in the OpenAPI document: %+v; want pattern %s, maxLength %d, default %s", schema, l, store.LineagePattern, store.MaxLineageLen, store.DefaultLineage)
		}
	}
	found := false
	for _, p := range api.Paths["/v1/runs"]["get"].Parameters {
		found = found || p.Name == "lineage" && p.In == "query"
	}
	if !found {
		t.Error("GET /v1/runs documents no lineage query parameter")
	}
}
