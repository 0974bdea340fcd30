package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/lesfarm/lesfarm/coordinator/builds/buildstest"
	"github.com/lesfarm/lesfarm/coordinator/store"
)

// seedSeries records decode_tps and hit_rate points for two device models
// over builds 1..n.
func seedSeries(t *testing.T, st *store.Store, n int) {
	t.Helper()
	var ps []store.AddRegressPointParams
	for _, model := range []string{"Pixel 8", "Galaxy S24"} {
		for seq := 1; seq <= n; seq++ {
			for _, metric := range []string{"decode_tps", "hit_rate"} {
				v := float64(seq)
				if model == "Galaxy S24" {
					v += 100
				}
				ps = append(ps, store.AddRegressPointParams{
					Series: store.RegressSeries{Suite: "les-ladder", Config: "lookahead/budget=25%", Metric: metric, DeviceModel: model, OSMajor: "14", Lineage: "main"},
					Point:  store.RegressPoint{Seq: int64(seq), Value: v, Stddev: 0.5, N: 3, Build: fmt.Sprintf("b%d", seq)},
				})
			}
		}
	}
	if _, err := st.AddRegressPoints(context.Background(), ps); err != nil {
		t.Fatal(err)
	}
}

func TestSeries(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	seedSeries(t, e.st, 12)
	resp := e.api.Get("/v1/series?suite=les-ladder&metric=decode_tps&last=5")
	if resp.Code != http.StatusOK {
		t.Fatalf("series: %d %s", resp.Code, resp.Body)
	}
	var out struct {
		Series []SeriesWithPoints `json:"series"`
	}
	json.Unmarshal(resp.Body.Bytes(), &out)
	if len(out.Series) != 2 || out.Series[0].DeviceModel != "Galaxy S24" || out.Series[1].DeviceModel != "Pixel 8" {
		t.Fatalf("series %+v", out.Series)
	}
	var builds []string
	for _, p := range out.Series[1].Points {
		builds = append(builds, p.Build)
	}
	if fmt.Sprint(builds) != "[b8 b9 b10 b11 b12]" || out.Series[1].Points[4].Value != 12 {
		t.Fatalf("last 5 points of Pixel 8: %v %+v", builds, out.Series[1].Points)
	}
	resp = e.api.Get("/v1/series?suite=les-ladder&metric=decode_tps&device_model=Pixel%208")
	json.Unmarshal(resp.Body.Bytes(), &out)
	if len(out.Series) != 1 || len(out.Series[0].Points) != 12 {
		t.Fatalf("one model: %d series", len(out.Series))
	}
	// Downsampled on the server: 12 builds in 4 shared buckets of 3, each
	// point at its bucket's last build with the bucket's range.
	resp = e.api.Get("/v1/series?suite=les-ladder&metric=decode_tps&points=4")
	var ds struct {
		Series []struct {
			DeviceModel string `json:"device_model"`
			Points      []struct {
				Seq    int64   `json:"seq"`
				Value  float64 `json:"value"`
				Build  string  `json:"build"`
				Bucket struct {
					SeqFirst int64   `json:"seq_first"`
					Builds   int     `json:"builds"`
					Min      float64 `json:"min"`
					Max      float64 `json:"max"`
				} `json:"bucket"`
			} `json:"points"`
		} `json:"series"`
	}
	if err := json.Unmarshal(resp.Body.Bytes(), &ds); err != nil || resp.Code != http.StatusOK || len(ds.Series) != 2 {
		t.Fatalf("points=4: %d %v %s", resp.Code, err, resp.Body)
	}
	for _, sr := range ds.Series {
		if len(sr.Points) != 4 {
			t.Fatalf("%s: %d points with points=4", sr.DeviceModel, len(sr.Points))
		}
		if p := sr.Points[3]; p.Build != "b12" || p.Bucket.SeqFirst != sr.Points[2].Seq+1 || p.Bucket.Builds != 3 {
			t.Errorf("%s: last bucket %+v", sr.DeviceModel, p)
		}
	}
	if p := ds.Series[1].Points[3]; p.Value != 11 || p.Bucket.Min != 10 || p.Bucket.Max != 12 {
		t.Errorf("Pixel 8's last bucket (builds 10–12) %+v, want mean 11, min 10, max 12", p)
	}
	for _, bad := range []string{"-1", "5001", "x"} {
		if resp := e.api.Get("/v1/series?suite=les-ladder&metric=decode_tps&points=" + bad); resp.Code != http.StatusUnprocessableEntity ||
			!decodeProblem(t, resp.Header().Get("Content-Type"), resp.Body.Bytes()).hasLocation("query.points") {
			t.Errorf("points=%s: %d %s", bad, resp.Code, resp.Body)
		}
	}
	if resp := e.api.Get("/v1/series?suite=les-ladder"); resp.Code != http.StatusUnprocessableEntity ||
		!decodeProblem(t, resp.Header().Get("Content-Type"), resp.Body.Bytes()).hasLocation("query.metric") {
		t.Fatalf("missing metric: %d %s", resp.Code, resp.Body)
	}
	resp = e.api.Get("/v1/series/catalog")
	var cat struct {
		Items []SeriesFamily `json:"items"`
	}
	json.Unmarshal(resp.Body.Bytes(), &cat)
	if len(cat.Items) != 2 || cat.Items[0].Metric != "decode_tps" || cat.Items[0].Devices != 2 {
		t.Fatalf("catalog %+v", cat.Items)
	}
}

func TestResultSeries(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	add := func(build, model string, tps float64, valid bool) {
		t.Helper()
		resp := e.api.Post("/v1/runs", e.auth(), map[string]any{"suite": "smoke", "build": build})
		var set RunSet
		json.Unmarshal(resp.Body.Bytes(), &set)
		if len(set.Runs) != 1 {
			t.Fatalf("trigger: %d %s", resp.Code, resp.Body)
		}
		if _, err := e.st.Pool().Exec(ctx, `INSERT INTO results (run_id, config_index, config_key, suite, build, device_id, device_model,
			decode_tps_mean, decode_tps_stddev, valid) VALUES ($1, 0, 'resident', 'smoke', $2, 'd', $3, $4, 0.5, $5)`,
			set.Runs[0].ID, build, model, tps, valid); err != nil {
			t.Fatal(err)
		}
	}
	buildstest.Register(t, e.st, "b1", "b2", "b3")
	add("b1", "Pixel 8", 10, true)
	add("b1", "Pixel 8", 12, true) // two runs of one build average
	add("b1", "Galaxy S24", 20, true)
	add("b2", "Pixel 8", 14, true)
	add("b2", "Galaxy S24", 99, false) // invalid: excluded
	add("b3", "Galaxy S24", 18, true)
	resp := e.api.Get("/v1/results/series?suite=smoke&metric=decode_tps")
	if resp.Code != http.StatusOK {
		t.Fatalf("%d %s", resp.Code, resp.Body)
	}
	var out struct {
		Series []SeriesWithPoints `json:"series"`
	}
	json.Unmarshal(resp.Body.Bytes(), &out)
	got := ""
	for _, s := range out.Series {
		got += s.DeviceModel + ":"
		for _, p := range s.Points {
			got += fmt.Sprintf(" %d/%s=%g(n%d)", p.Seq, p.Build, p.Value, p.N)
		}
		got += ";"
	}
	if want := "Galaxy S24: 1/b1=20(n1) 3/b3=18(n1);Pixel 8: 1/b1=11(n2) 2/b2=14(n1);"; got != want {
		t.Fatalf("series %s\nwant   %s", got, want)
	}
	if resp := e.api.Get("/v1/results/series?suite=smoke&metric=decode_tps&last=1&device_model=Pixel%208"); !strings.Contains(resp.Body.String(), `"build":"b2"`) || strings.Contains(resp.Body.String(), `"build":"b1"`) {
		t.Fatalf("last=1: %s", resp.Body)
	}
	if resp := e.api.Get("/v1/results/series?suite=smoke&metric=bogus"); resp.Code != http.StatusUnprocessableEntity ||
		!decodeProblem(t, resp.Header().Get("Content-Type"), resp.Body.Bytes()).hasLocation("query.metric") {
		t.Fatalf("bad metric: %d %s", resp.Code, resp.Body)
	}
}
