package api

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/jobs"
	"github.com/lesfarm/lesfarm/protocol"
)

// seedTelemetry creates a run on a device, claims it and streams n decode
// steps of config 0 in two repetitions, after one warm-up repetition and a
// prefill step that the drill-down must leave out. Step i takes (10+i%5) ms,
// stalls i%3 ms and reads 1000·i bytes; layer l of every step has l+1 hits,
// 2 misses, 1 prefetch used and l prefetches wasted.
func seedTelemetry(t *testing.T, st *store.Store, n, layers int) int64 {
	t.Helper()
	ctx := context.Background()
	if _, err := st.UpsertDevice(ctx, &store.UpsertDeviceParams{ID: "dd-1", TTL: time.Minute, Coordinator: "test",
		Fingerprint: protocol.Fingerprint{Platform: "linux", DeviceModel: "emu"}}); err != nil {
		t.Fatal(err)
	}
	spec, err := jobs.Builtin("smoke")
	if err != nil {
		t.Fatal(err)
	}
	_, runs, err := st.CreateRuns(ctx, &store.CreateRunsParams{Spec: spec, Build: "b1"})
	if err != nil {
		t.Fatal(err)
	}
	g, err := st.ClaimRun(ctx, &store.ClaimRunParams{DeviceID: "dd-1", RunIDs: []int64{runs[0].ID}, LeaseTTL: time.Minute, Coordinator: "test"})
	if err != nil {
		t.Fatal(err)
	}
	lc := func() *protocol.LayerCounts {
		c := &protocol.LayerCounts{}
		for l := range layers {
			c.Hits = append(c.Hits, int32(l+1))
			c.Misses = append(c.Misses, 2)
			c.PrefetchUsed = append(c.PrefetchUsed, 1)
			c.PrefetchWasted = append(c.PrefetchWasted, int32(l))
		}
		return c
	}
	var samples []protocol.Sample
	noise := protocol.Sample{Repetition: -1, Step: 0, Phase: protocol.PhaseDecode, Tokens: 1, DurationNS: 9e9, Layers: lc()}
	samples = append(samples, noise, protocol.Sample{Repetition: 0, Phase: protocol.PhasePrefill, Tokens: 16, DurationNS: 9e9, Layers: lc()})
	for i := range n {
		samples = append(samples, protocol.Sample{Repetition: i * 2 / n, Step: i % (n / 2), Phase: protocol.PhaseDecode, Tokens: 1,
			DurationNS: int64(10+i%5) * 1e6, StallNS: int64(i%3) * 1e6, BytesRead: int64(1000 * i), CacheBytes: int64(i),
			Layers: lc()})
	}
	var batches []*protocol.TelemetryBatch
	for seq := 0; len(samples) > 0; seq++ {
		k := min(len(samples), 100)
		batches = append(batches, &protocol.TelemetryBatch{V: protocol.Version, RunID: g.Run.ID, Token: g.Token, DeviceID: "dd-1", Seq: uint64(seq), Samples: samples[:k]})
		samples = samples[k:]
	}
	if _, err := st.InsertTelemetry(ctx, batches); err != nil {
		t.Fatal(err)
	}
	return g.Run.ID
}

func TestRunConfigTimeline(t *testing.T) {
	e := newEnv(t)
	const n = 2000
	id := seedTelemetry(t, e.st, n, 4)
	get := func(path string, v any) int {
		resp := e.do("GET", path, nil)
		defer resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
				t.Fatal(err)
			}
		}
		return resp.StatusCode
	}
	for _, tc := range []struct {
		points, want int
	}{{5000, n}, {400, 400}, {7, 7}} {
		var tl Timeline
		if code := get("/v1/runs/"+strconv.FormatInt(id, 10)+"/configs/0/timeline?points="+strconv.Itoa(tc.points), &tl); code != 200 {
			t.Fatalf("points=%d: %d", tc.points, code)
		}
		if tl.StepsTotal != n || len(tl.Points) != tc.want {
			t.Fatalf("points=%d: %d steps in %d points, want %d in %d", tc.points, tl.StepsTotal, len(tl.Points), n, tc.want)
		}
		// Buckets cover every measured step once, in order, and their
		// per-token figures are the exact averages of their steps.
		next := 0
		for _, p := range tl.Points {
			if p.Index != next {
				t.Fatalf("points=%d: bucket starts at %d, want %d", tc.points, p.Index, next)
			}
			var ms, stall, bytes float64
			for i := p.Index; i < p.Index+p.Steps; i++ {
				ms += float64(10 + i%5)
				stall += float64(i % 3)
				bytes += float64(1000 * i)
			}
			k := float64(p.Steps)
			if math.Abs(p.MSPerToken-ms/k) > 1e-9 || math.Abs(p.StallMSPerToken-stall/k) > 1e-9 || math.Abs(p.BytesPerToken-bytes/k) > 1e-6 {
				t.Fatalf("points=%d bucket %d: %+v, want %.3f ms, %.3f stall, %.1f bytes", tc.points, p.Index, p, ms/k, stall/k, bytes/k)
			}
			if wantRep := p.Index * 2 / n; p.Repetition != wantRep || p.Step != p.Index%(n/2) {
				t.Fatalf("bucket %d at rep %d step %d", p.Index, p.Repetition, p.Step)
			}
			next += p.Steps
		}
		if next != n {
			t.Fatalf("buckets cover %d steps", next)
		}
	}
	var lb LayerBreakdown
	if code := get("/v1/runs/"+strconv.FormatInt(id, 10)+"/configs/0/layers", &lb); code != 200 {
		t.Fatalf("layers: %d", code)
	}
	if lb.Steps != n || len(lb.Layers) != 4 {
		t.Fatalf("layers: %d steps, %d layers", lb.Steps, len(lb.Layers))
	}
	for l, s := range lb.Layers {
		h, m, u, w := float64(l+1), 2.0, 1.0, float64(l)
		if s.Hits != int64(h)*n || s.Misses != 2*n || math.Abs(s.HitRate-h/(h+m)) > 1e-12 ||
			math.Abs(s.PrefetchPrecision-u/(u+w)) > 1e-12 || math.Abs(s.PrefetchRecall-u/(u+m)) > 1e-12 {
			t.Errorf("layer %d: %+v", l, s)
		}
	}
	for _, p := range []string{"/v1/runs/999999/configs/0/timeline", "/v1/runs/999999/configs/0/layers"} {
		if code := get(p, &struct{}{}); code != 404 {
			t.Errorf("%s: %d, want 404", p, code)
		}
	}
	for _, p := range []string{"/v1/runs/" + strconv.FormatInt(id, 10) + "/configs/0/timeline?points=0", "/v1/runs/" + strconv.FormatInt(id, 10) + "/configs/-1/layers"} {
		if code := get(p, &struct{}{}); code != 422 {
			t.Errorf("%s: %d, want 422", p, code)
		}
	}
	// A config without samples is an empty timeline, not an error.
	var empty Timeline
	if code := get("/v1/runs/"+strconv.FormatInt(id, 10)+"/configs/3/timeline", &empty); code != 200 || empty.StepsTotal != 0 || len(empty.Points) != 0 {
		t.Errorf("config without samples: %d %+v", code, empty)
	}
}
