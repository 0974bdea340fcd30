package api

import (
	"encoding/json"
	"net/http"
	"slices"
	"testing"

	"github.com/lesfarm/lesfarm/coordinator/builds/buildstest"
)

// TestABListBySide: GET /v1/ab?build=B lists B's comparisons where it is
// under test (the default, side=build), where it is the baseline
// (side=baseline) or both (side=either), newest first; an unknown side is
// a 422. The build page lists a build's comparisons on both sides with it.
func TestABListBySide(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	buildstest.Register(t, e.st, "abs-1", "abs-2", "abs-3")
	abDevice(t, e.st, "abs-host")
	trigger := func(build, baseline string) int64 {
		t.Helper()
		resp := e.api.Post("/v1/runs", e.auth(), map[string]any{"suite": "smoke", "build": build, "baseline": baseline})
		var out TriggerResult
		if resp.Code != http.StatusCreated || json.Unmarshal(resp.Body.Bytes(), &out) != nil || out.AB == nil {
			t.Fatalf("trigger %s vs %s: %d %s", build, baseline, resp.Code, resp.Body)
		}
		return out.AB.ID
	}
	under := trigger("abs-2", "abs-1")    // abs-2 under test
	baseline := trigger("abs-3", "abs-2") // abs-2 the baseline
	other := trigger("abs-3", "abs-1")    // abs-2 not in it
	for _, tc := range []struct {
		query string
		want  []int64
	}{
		{"build=abs-2", []int64{under}},
		{"build=abs-2&side=build", []int64{under}},
		{"build=abs-2&side=baseline", []int64{baseline}},
		{"build=abs-2&side=either", []int64{baseline, under}},
		{"build=abs-1&side=either", []int64{other, under}},
		{"side=either", []int64{other, baseline, under}},
	} {
		resp := e.api.Get("/v1/ab?" + tc.query)
		var out struct {
			Items []ABComparison `json:"items"`
		}
		if resp.Code != http.StatusOK || json.Unmarshal(resp.Body.Bytes(), &out) != nil {
			t.Fatalf("%s: %d %s", tc.query, resp.Code, resp.Body)
		}
		var got []int64
		for _, a := range out.Items {
			got = append(got, a.ID)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("GET /v1/ab?%s: %v, want %v", tc.query, got, tc.want)
		}
	}
	if resp := e.api.Get("/v1/ab?build=abs-2&side=under"); resp.Code != http.StatusUnprocessableEntity {
		t.Errorf("side=under: %d %s, want 422", resp.Code, resp.Body)
	}
}
