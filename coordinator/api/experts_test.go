package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/internal/testenv"
	"github.com/lesfarm/lesfarm/jobs"
	"github.com/lesfarm/lesfarm/protocol"
)

// seedExperts adds per-expert counts to config 0 of run id (seeded by
// seedTelemetry): layers × experts, where layer l's expert (3l+5) mod
// experts is hot (demanded 1000 times in each of two batches, missed 10
// times) and every other expert is demanded e%7+1 times and missed once
// when e is odd.
func seedExperts(t *testing.T, e *env, id int64, layers, experts int) {
	t.Helper()
	run, err := e.st.GetRun(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	var batches []*protocol.TelemetryBatch
	for seq := range 2 {
		b := &protocol.TelemetryBatch{V: protocol.Version, RunID: id, Token: run.Token, DeviceID: "dd-1", Seq: uint64(1000 + seq)}
		for l := range layers {
			r := protocol.ExpertLoad{ConfigIndex: 0, Layer: l, Steps: 1000}
			for x := range experts {
				d, m := int32(x%7+1), int32(x%2)
				if x == (3*l+5)%experts {
					d, m = 1000, 10
				}
				r.Experts, r.Demand, r.Miss = append(r.Experts, int32(x)), append(r.Demand, d), append(r.Miss, m)
			}
			b.Experts = append(b.Experts, r)
		}
		if err := b.Validate(); err != nil {
			t.Fatal(err)
		}
		batches = append(batches, b)
	}
	if _, err := e.st.InsertTelemetry(context.Background(), batches); err != nil {
		t.Fatal(err)
	}
}

func TestRunConfigExperts(t *testing.T) {
	e := newEnv(t)
	id := seedTelemetry(t, e.st, 20, 4)
	const layers, experts = 40, 256
	seedExperts(t, e, id, layers, experts)
	base := fmt.Sprintf("/v1/runs/%d/configs/0/experts", id)
	get := func(q string) (*ExpertHeatmap, *http.Response) {
		path := base + q
		if strings.HasPrefix(q, "/") {
			path = q
		}
		resp := e.do("GET", path, nil)
		defer resp.Body.Close()
		var hm ExpertHeatmap
		if resp.StatusCode == http.StatusOK {
			if err := json.NewDecoder(resp.Body).Decode(&hm); err != nil {
				t.Fatal(err)
			}
		}
		return &hm, resp
	}
	cell := func(metric string, x int) int64 {
		d, m := int64(x%7+1), int64(x%2)
		switch metric {
		case "miss":
			return 2 * m
		case "hit":
			return 2 * (d - m)
		}
		return 2 * d
	}
	for _, metric := range []string{"demand", "miss", "hit"} {
		hm, resp := get("?metric=" + metric)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d", metric, resp.StatusCode)
		}
		if hm.Metric != metric || hm.Layers != layers || hm.Experts != experts || hm.LayerBin != 1 || hm.ExpertBin != 1 || hm.Steps != 2000 ||
			len(hm.Cells) != layers || len(hm.Cells[0]) != experts || len(hm.Top) != 10 {
			t.Fatalf("%s: shape %d×%d (bins %d, %d), %d layers %d experts %d steps, %d top", metric, len(hm.Cells), len(hm.Cells[0]),
				hm.LayerBin, hm.ExpertBin, hm.Layers, hm.Experts, hm.Steps, len(hm.Top))
		}
		var total int64
		for l, row := range hm.Cells {
			for x, v := range row {
				want := cell(metric, x)
				if x == (3*l+5)%experts {
					want = map[string]int64{"demand": 2000, "miss": 20, "hit": 1980}[metric]
				}
				if v != want {
					t.Fatalf("%s: layer %d expert %d = %d, want %d", metric, l, x, v, want)
				}
				total += v
			}
		}
		if hm.Total != total {
			t.Fatalf("%s: total %d, cells sum to %d", metric, hm.Total, total)
		}
		if metric != "miss" {
			for _, c := range hm.Top {
				if c.Expert != (3*c.Layer+5)%experts {
					t.Fatalf("%s: top cell %+v is not a planted hot expert", metric, c)
				}
			}
		}
	}
	// Bounded on the server: 40 × 256 into at most 16 × 20 cells, sums kept.
	hm, resp := get("?max_layers=16&max_experts=20&top=0")
	if resp.StatusCode != 200 || hm.LayerBin != 3 || hm.ExpertBin != 13 || len(hm.Cells) != 14 || len(hm.Cells[0]) != 20 || len(hm.Top) != 0 {
		t.Fatalf("binned: %d, bins %d×%d, %d×%d cells, %d top", resp.StatusCode, hm.LayerBin, hm.ExpertBin, len(hm.Cells), len(hm.Cells[0]), len(hm.Top))
	}
	full, _ := get("")
	var sum int64
	for _, row := range hm.Cells {
		for _, v := range row {
			sum += v
		}
	}
	if sum != full.Total || hm.Total != full.Total {
		t.Fatalf("binned cells sum to %d (total %d), unbinned total %d", sum, hm.Total, full.Total)
	}
	// A config without counts is an empty matrix, not an error.
	if hm, resp := get(fmt.Sprintf("/v1/runs/%d/configs/2/experts", id)); resp.StatusCode != 200 || len(hm.Cells) != 0 || hm.Total != 0 {
		t.Fatalf("config without counts: %d %+v", resp.StatusCode, hm)
	}
	for _, q := range []string{"?metric=heat", "?max_layers=0", "?max_experts=5000", "?top=-1"} {
		resp := e.do("GET", base+q, nil)
		resp.Body.Close()
		if resp.StatusCode != 422 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/problem+json") {
			t.Errorf("%s: %d %s, want 422 problem+json", q, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
	}
	resp = e.do("GET", "/v1/runs/999999/configs/0/experts", nil)
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Errorf("unknown run: %d", resp.StatusCode)
	}
}

func TestRunDeviceTrace(t *testing.T) {
	e := newEnv(t)
	id := seedTelemetry(t, e.st, 4, 1)
	get := func(q string) (*DeviceTrace, int) {
		resp := e.do("GET", fmt.Sprintf("/v1/runs/%d/device-trace%s", id, q), nil)
		defer resp.Body.Close()
		var dt DeviceTrace
		if resp.StatusCode == 200 {
			if err := json.NewDecoder(resp.Body).Decode(&dt); err != nil {
				t.Fatal(err)
			}
		}
		return &dt, resp.StatusCode
	}
	if dt, code := get(""); code != 200 || dt.Reported || len(dt.Points) != 0 {
		t.Fatalf("before any state: %d %+v", code, dt)
	}
	for i := range 30 {
		temp, batt := 35+float64(i)/10, 80.0
		if err := e.st.RecordDeviceState(context.Background(), []int64{id}, &protocol.DeviceState{MaxTempC: &temp, BatteryPercent: &batt, ThermalStatus: "fair"}); err != nil {
			t.Fatal(err)
		}
	}
	dt, code := get("?points=7")
	if code != 200 || !dt.Reported || dt.SamplesTotal != 30 || len(dt.Points) != 7 {
		t.Fatalf("trace: %d, reported %v, %d samples in %d points", code, dt.Reported, dt.SamplesTotal, len(dt.Points))
	}
	n := 0
	for i, p := range dt.Points {
		if p.MaxTempC == nil || p.BatteryPercent == nil || *p.BatteryPercent != 80 || p.ThermalStatus != "fair" || p.BatteryTempC != nil || p.Charging != nil {
			t.Fatalf("point %d: %+v", i, p)
		}
		if i > 0 && (!p.At.After(dt.Points[i-1].At) || *p.MaxTempC <= *dt.Points[i-1].MaxTempC) {
			t.Fatalf("point %d not after the one before: %+v", i, p)
		}
		n += p.Samples
	}
	if n != 30 {
		t.Fatalf("points cover %d samples", n)
	}
	for _, q := range []string{"?points=0", "?points=x"} {
		if _, code := get(q); code != 422 {
			t.Errorf("%s: %d, want 422", q, code)
		}
	}
	resp := e.do("GET", "/v1/runs/999999/device-trace", nil)
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Errorf("unknown run: %d", resp.StatusCode)
	}
}

// BenchmarkRunConfigExperts serves the heatmap of one config of a
// 40-layer, 256-expert model measured over 6,000 decode steps: the 240
// expert_load rows the agent sends for it (6 carries × 40 layers), read,
// summed and encoded as a 40 × 256 matrix per request.
func BenchmarkRunConfigExperts(b *testing.B) {
	ctx := context.Background()
	st, err := store.Open(ctx, testenv.MigratedPostgresURL(b), store.Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(st.Close)
	h, _, err := New(Deps{Store: st, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(h)
	b.Cleanup(srv.Close)
	addDevice(b, st, "bx-1", "android", "Pixel 8", nil)
	spec, _ := jobs.Builtin("smoke")
	_, runs, err := st.CreateRuns(ctx, &store.CreateRunsParams{Spec: spec})
	if err != nil {
		b.Fatal(err)
	}
	g, err := st.ClaimRun(ctx, &store.ClaimRunParams{DeviceID: "bx-1", RunIDs: []int64{runs[0].ID}, LeaseTTL: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	var batches []*protocol.TelemetryBatch
	for seq := range 6 {
		tb := &protocol.TelemetryBatch{V: protocol.Version, RunID: g.Run.ID, Token: g.Token, DeviceID: "bx-1", Seq: uint64(seq)}
		for l := range 40 {
			r := protocol.ExpertLoad{Layer: l, Steps: 1024}
			for e := range 256 {
				r.Experts, r.Demand, r.Miss = append(r.Experts, int32(e)), append(r.Demand, int32(1+(e*l)%64)), append(r.Miss, int32((e*l)%7))
			}
			tb.Experts = append(tb.Experts, r)
		}
		batches = append(batches, tb)
	}
	if _, err := st.InsertTelemetry(ctx, batches); err != nil {
		b.Fatal(err)
	}
	url := fmt.Sprintf("%s/v1/runs/%d/configs/0/experts?metric=miss", srv.URL, g.Run.ID)
	var size int
	b.ReportAllocs()
	for b.Loop() {
		resp, err := http.Get(url)
		if err != nil {
			b.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("%d %s", resp.StatusCode, body)
		}
		size = len(body)
	}
	b.ReportMetric(float64(size), "bytes/response")
}
