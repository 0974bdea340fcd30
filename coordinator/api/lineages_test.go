package api

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/lesfarm/lesfarm/coordinator/builds/buildstest"
	"github.com/lesfarm/lesfarm/coordinator/store"
)

// TestListLineages: GET /v1/lineages lists every lineage seen in runs and
// regression series, main first, with its counts.
func TestListLineages(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	addDevice(t, e.st, "p1", "android", "Pixel 8", nil)
	buildstest.Register(t, e.st, "rc-1", "rc-2", "b1")
	for _, body := range []map[string]any{
		{"suite": "smoke", "build": "rc-1", "lineage": "release-1"},
		{"suite": "smoke", "build": "rc-2", "lineage": "release-1"},
		{"suite": "smoke", "build": "b1"},
	} {
		if resp := e.api.Post("/v1/runs", e.auth(), body); resp.Code != http.StatusCreated {
			t.Fatalf("trigger: %d %s", resp.Code, resp.Body)
		}
	}
	if _, err := e.st.AddRegressPoints(t.Context(), []store.AddRegressPointParams{{
		Series: store.RegressSeries{Suite: "smoke", Config: "resident", Metric: "decode_tps", DeviceModel: "Pixel 8", Lineage: "release-2"},
		Point:  store.RegressPoint{Seq: 1, Value: 10},
	}}); err != nil {
		t.Fatal(err)
	}
	resp := e.api.Get("/v1/lineages")
	if resp.Code != http.StatusOK {
		t.Fatalf("lineages: %d %s", resp.Code, resp.Body)
	}
	var out struct {
		Items []Lineage `json:"items"`
	}
	if err := json.Unmarshal(resp.Body.Bytes(), &out); err != nil {
		t.Fatal(err)
	}
	type row struct {
		lineage      string
		runs, series int64
		hasLast      bool
	}
	var got []row
	for _, x := range out.Items {
		got = append(got, row{x.Lineage, x.Runs, x.Series, x.LastRunAt != nil})
	}
	want := []row{{"main", 1, 0, true}, {"release-1", 2, 0, true}, {"release-2", 0, 1, false}}
	if len(got) != len(want) {
		t.Fatalf("lineages %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("lineages %+v, want %+v", got, want)
		}
	}
}
