package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/ingest"
	"github.com/lesfarm/lesfarm/coordinator/regress/monitor"
	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/internal/testenv"
	"github.com/lesfarm/lesfarm/jobs"
	"github.com/lesfarm/lesfarm/protocol"
)

// FuzzIngestThenRead is issue 29's goal "a fuzz target over the result and
// telemetry decoders asserts that nothing they accept can make a read
// endpoint fail" (finding 2: one device's 1e308 made the suite's result
// series answer 500, and the downsampled series panic on +Inf). Each input
// is a telemetry batch and a result as a device would publish them. What
// the decoders accept goes through ingest's value checks
// (RunBounds.CheckTelemetry, ingest.ScreenResult), is stored in real
// Postgres for a fresh run of the smoke suite (its identity set to the
// run's, as a device that passed the subject and msg-id checks), and fed
// to the regression monitor. Then every read endpoint that shows runs,
// results, series, alerts or the device must answer without a server
// error, in valid JSON. Rows accumulate across inputs, so a value stored
// by one input must not break the reads of the next.
func FuzzIngestThenRead(f *testing.F) {
	ctx := context.Background()
	st, err := store.Open(ctx, testenv.MigratedPostgresURL(f), store.Config{})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(st.Close)
	h, _, err := New(Deps{Store: st, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		f.Fatal(err)
	}
	srv := httptest.NewServer(h)
	f.Cleanup(srv.Close)
	mon, err := monitor.New(monitor.Config{Store: st, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		f.Fatal(err)
	}
	ram := int64(8 << 30)
	if _, err := st.UpsertDevice(ctx, &store.UpsertDeviceParams{ID: "fz", TTL: time.Hour,
		Fingerprint: protocol.Fingerprint{Platform: "android", DeviceModel: "Pixel 8", OSVersion: "14", RAMBytes: &ram}}); err != nil {
		f.Fatal(err)
	}
	spec, err := jobs.Builtin("smoke")
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range fuzzSeeds(f) {
		f.Add(s[0], s[1])
	}
	var builds atomic.Int64
	f.Fuzz(func(t *testing.T, telemetry, result []byte) {
		// A hang is a failure too: every step is bounded.
		ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		// A fresh run, leased to the device, on a build of its own: every
		// input adds one point to the smoke suite's series.
		_, runs, err := st.CreateRuns(ctx, &store.CreateRunsParams{Spec: spec, Build: fmt.Sprintf("fz-%d", builds.Add(1))})
		if err != nil {
			t.Fatal(err)
		}
		g, err := st.ClaimRun(ctx, &store.ClaimRunParams{DeviceID: "fz", RunIDs: []int64{runs[0].ID}, LeaseTTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		bounds, err := st.RunBounds(ctx, []int64{g.Run.ID})
		if err != nil {
			t.Fatal(err)
		}
		rb := bounds[g.Run.ID]
		if tb, err := protocol.DecodeTelemetry(telemetry); err == nil {
			tb.RunID, tb.Token, tb.DeviceID = g.Run.ID, g.Token, "fz"
			if rb.CheckTelemetry(tb) == nil {
				if _, err := st.InsertTelemetry(ctx, []*protocol.TelemetryBatch{tb}); err != nil {
					t.Fatalf("telemetry accepted by the checks but not stored: %v", err)
				}
			}
		}
		if res, err := protocol.DecodeResult(result); err == nil {
			res.RunID, res.Token, res.DeviceID = g.Run.ID, g.Token, "fz"
			_ = ingest.ScreenResult(rb, res) // a misfit is stored as a failed result
			run, err := st.CompleteRun(ctx, res)
			if err != nil && !errors.Is(err, store.ErrAlreadyCompleted) {
				t.Fatalf("result accepted by the checks but not stored: %v", err)
			}
			if run != nil {
				if _, err := mon.ObserveRun(ctx, run); err != nil {
					t.Fatalf("regression monitor on the stored result: %v", err)
				}
			}
		}
		// A result the decoder refused leaves the lease: end it, so that
		// the next input's run can be leased to the device.
		if err := st.ReleaseAssignment(ctx, &store.ReleaseParams{RunID: g.Run.ID, Token: g.Token, Fail: true, Outcome: "failed",
			Reason: "no result decoded"}); err != nil && !errors.Is(err, store.ErrStaleToken) {
			t.Fatal(err)
		}
		id := g.Run.ID
		for _, path := range []string{
			fmt.Sprintf("/v1/runs/%d", id),
			fmt.Sprintf("/v1/results?run=%d", id),
			"/v1/runs?limit=5",
			"/v1/results?suite=smoke&limit=50",
			"/v1/series/catalog",
			"/v1/alerts",
			"/v1/devices/fz",
			"/v1/lineages",
		} {
			readOK(t, srv.URL+path, true)
		}
		for _, metric := range []string{"decode_tps", "prefill_tps", "ttft_ms", "peak_memory_bytes", "hit_rate", "stall_fraction"} {
			readOK(t, srv.URL+"/v1/results/series?suite=smoke&metric="+metric, true)
			readOK(t, srv.URL+"/v1/series?suite=smoke&metric="+metric, true)
			readOK(t, srv.URL+"/v1/series?suite=smoke&metric="+metric+"&points=2", true)
		}
		// Per-config views: a 404 for a config the run does not have is an
		// answer, a 5xx is not.
		for _, cfg := range []string{"0", "1", "resident"} {
			for _, view := range []string{"timeline", "layers", "experts"} {
				readOK(t, fmt.Sprintf("%s/v1/runs/%d/configs/%s/%s", srv.URL, id, cfg, view), false)
			}
		}
		readOK(t, fmt.Sprintf("%s/v1/runs/%d/device-trace", srv.URL, id), false)
	})
}

// readOK fails t when GET url answers a server error, a body that is not
// JSON, or (want200) anything but 200.
func readOK(t *testing.T, url string, want200 bool) {
	t.Helper()
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("GET %s: body: %v", url, err)
	}
	if resp.StatusCode >= 500 || (want200 && resp.StatusCode != http.StatusOK) {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, body)
	}
	if ct := resp.Header.Get("Content-Type"); strings.Contains(ct, "json") && !json.Valid(body) {
		t.Fatalf("GET %s: invalid JSON: %s", url, body)
	}
}

// fuzzSeeds are (telemetry, result) pairs: a plausible report, and the
// garbage of finding 2 (±1e308, negative rates and times, an unknown
// config index and key, telemetry for config 99, byte counts beyond the
// model, fractions beyond 1), plus bytes the decoders refuse.
func fuzzSeeds(f *testing.F) [][2][]byte {
	f.Helper()
	// Plain JSON, not protocol.Encode, which refuses much of this.
	enc := func(m any) []byte {
		data, err := json.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		return data
	}
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	layers := []int32{1, 2, 3}
	tel := func(cfg int, bytesRead int64, dur int64) []byte {
		return enc(&protocol.TelemetryBatch{V: protocol.Version, RunID: 1, Token: 1, DeviceID: "fz", SentAt: now, Samples: []protocol.Sample{
			{ConfigIndex: cfg, Phase: protocol.PhasePrefill, Tokens: 5, DurationNS: dur, BytesRead: bytesRead},
			{ConfigIndex: cfg, Step: 1, Phase: protocol.PhaseDecode, Tokens: 1, DurationNS: dur, StallNS: dur / 2, BytesRead: bytesRead, CacheBytes: 1 << 20,
				Layers: &protocol.LayerCounts{Hits: layers, Misses: layers, PrefetchUsed: layers, PrefetchWasted: layers}},
		}})
	}
	res := func(mut func(*protocol.ConfigResult)) []byte {
		c := protocol.ConfigResult{ConfigIndex: 0, ConfigKey: "resident", Valid: true, Repetitions: 3,
			DecodeTPS:  protocol.Stat{N: 3, Mean: 14.2, Median: 14.1, Stddev: 0.3},
			PrefillTPS: protocol.Stat{N: 3, Mean: 80, Median: 80, Stddev: 1},
			TTFTMS:     protocol.Stat{N: 3, Mean: 60, Median: 60, Stddev: 2}, HitRate: 0.9, StallFraction: 0.1, PeakMemoryBytes: 1 << 28}
		if mut != nil {
			mut(&c)
		}
		return enc(&protocol.Result{V: protocol.Version, RunID: 1, Token: 1, DeviceID: "fz", Outcome: protocol.OutcomeSucceeded, Configs: []protocol.ConfigResult{c},
			TelemetryBatches: 1, TelemetrySamples: 2, StartedAt: now, FinishedAt: now.Add(time.Minute)})
	}
	huge := bytes.ReplaceAll(res(nil), []byte(`"mean":14.2`), []byte(`"mean":1e400`)) // beyond float64: refused by the decoder
	return [][2][]byte{
		{tel(0, 4096, 1e7), res(nil)},
		{tel(0, 4096, 1e7), res(func(c *protocol.ConfigResult) { c.DecodeTPS.Mean, c.DecodeTPS.Stddev = 1e308, 1e308 })},
		{tel(0, 4096, -1e7), res(func(c *protocol.ConfigResult) { c.TTFTMS.Mean = -1e308; c.PrefillTPS.Mean = -5 })},
		{tel(99, 4096, 1e7), res(func(c *protocol.ConfigResult) { c.ConfigIndex, c.ConfigKey = 7, "does-not-exist" })},
		{tel(0, 1<<40, 1e7), res(func(c *protocol.ConfigResult) { c.HitRate, c.StallFraction = 7, -2 })},
		{tel(0, 4096, 1e7), res(func(c *protocol.ConfigResult) { c.Extra = map[string]float64{"x": 1e308, "y": -1e308} })},
		{tel(0, 4096, 1e7), res(func(c *protocol.ConfigResult) { c.Valid, c.InvalidReason = false, "context exceeded" })},
		{[]byte(`{"v":1,"samples":[{"duration_ns":NaN}]}`), huge},
	}
}
