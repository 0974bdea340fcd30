package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"testing"

	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/jobs"
)

// TestSeriesSurviveAbsurdRows stores what a device reported before values
// were bounded at ingest (issue 29, finding 2): decode_tps means of ±1e308
// in results and in regression points. The result series (avg over float8
// overflowed in Postgres: 500 for the whole suite) and the downsampled
// series (the bucket mean overflowed to +Inf: a panic in the handler) must
// answer 200 with finite JSON.
func TestSeriesSurviveAbsurdRows(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	for _, build := range []string{"b1", "b1", "b2"} {
		spec, _ := jobs.Builtin("smoke")
		_, runs, err := e.st.CreateRuns(ctx, &store.CreateRunsParams{Spec: spec, Build: build})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.st.Pool().Exec(ctx, `INSERT INTO results (run_id, config_index, config_key, suite, build, device_id, device_model,
			decode_tps_mean, decode_tps_stddev, valid) VALUES ($1, 0, 'resident', 'smoke', $2, 'd', 'Pixel 8', 1e308, 1e308, true)`,
			runs[0].ID, build); err != nil {
			t.Fatal(err)
		}
	}
	resp := e.api.Get("/v1/results/series?suite=smoke&metric=decode_tps")
	if resp.Code != http.StatusOK {
		t.Fatalf("result series: %d %s", resp.Code, resp.Body)
	}
	var rs struct {
		Series []SeriesWithPoints `json:"series"`
	}
	if err := json.Unmarshal(resp.Body.Bytes(), &rs); err != nil || len(rs.Series) != 1 || rs.Series[0].Points[0].Value != 1e308 {
		t.Fatalf("result series %s: %v", resp.Body, err)
	}

	var ps []store.AddRegressPointParams
	for seq := 1; seq <= 4; seq++ {
		ps = append(ps, store.AddRegressPointParams{
			Series: store.RegressSeries{Suite: "smoke", Config: "resident", Metric: "decode_tps", DeviceModel: "Pixel 8", OSMajor: "14", Lineage: "main"},
			Point:  store.RegressPoint{Seq: int64(seq), Value: 1e308, Stddev: 1e308, N: 1, Build: fmt.Sprintf("b%d", seq)},
		})
	}
	if _, err := e.st.AddRegressPoints(ctx, ps); err != nil {
		t.Fatal(err)
	}
	resp = e.api.Get("/v1/series?suite=smoke&metric=decode_tps&points=2")
	if resp.Code != http.StatusOK || !json.Valid(resp.Body.Bytes()) {
		t.Fatalf("downsampled series: %d %s", resp.Code, resp.Body)
	}
}

// TestMarshalFinite: a response holding NaN or ±Inf anywhere (fields,
// slices, maps, behind pointers and interfaces) is sent with them clamped,
// never refused mid-response.
func TestMarshalFinite(t *testing.T) {
	type inner struct {
		V []float64          `json:"v"`
		M map[string]float64 `json:"m"`
	}
	type body struct {
		A float64 `json:"a"`
		P *inner  `json:"p"`
		I any     `json:"i"`
		F float32 `json:"f"`
	}
	b := &body{A: math.NaN(), P: &inner{V: []float64{1, math.Inf(1)}, M: map[string]float64{"x": math.Inf(-1)}}, I: math.Inf(1), F: float32(math.Inf(1))}
	var buf bytes.Buffer
	if err := marshalFinite(&buf, b, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	var got body
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatalf("%s: %v", buf.String(), err)
	}
	if got.A != 0 || got.P.V[1] != math.MaxFloat64 || got.P.M["x"] != -math.MaxFloat64 || got.I != math.MaxFloat64 || got.F != math.MaxFloat32 {
		t.Fatalf("clamped to %s", buf.String())
	}
	buf.Reset()
	if err := marshalFinite(&buf, map[string]any{"ok": 1.5}, slog.New(slog.DiscardHandler)); err != nil || buf.String() != "{\"ok\":1.5}\n" {
		t.Fatalf("plain value: %q %v", buf.String(), err)
	}
}
