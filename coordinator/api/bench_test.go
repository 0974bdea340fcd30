package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/artifact"
	"github.com/lesfarm/lesfarm/coordinator/builds/buildstest"
	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/internal/testenv"
	"github.com/lesfarm/lesfarm/jobs"
)

// benchEnv is an API over real HTTP on a database with 2,000 runs, 50
// devices and two series of 200 points.
func benchEnv(b *testing.B) (string, string) {
	b.Helper()
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
	secret, _, _ := st.CreateAPIToken(ctx, "bench")
	buildstest.Register(b, st, "bench")
	spec, _ := jobs.Builtin("smoke")
	for i := range 2000 {
		if _, _, err := st.CreateRuns(ctx, &store.CreateRunsParams{Spec: spec, Build: fmt.Sprintf("b%d", i%40)}); err != nil {
			b.Fatal(err)
		}
	}
	for i := range 50 {
		addDevice(b, st, fmt.Sprintf("d%03d", i), "android", "Pixel 8", nil)
	}
	var ps []store.AddRegressPointParams
	for _, m := range []string{"Pixel 8", "Galaxy S24"} {
		for seq := 1; seq <= 200; seq++ {
			ps = append(ps, store.AddRegressPointParams{
				Series: store.RegressSeries{Suite: "smoke", Config: "on-demand/budget=50%", Metric: "decode_tps", DeviceModel: m, OSMajor: "14", Lineage: "main"},
				Point:  store.RegressPoint{Seq: int64(seq), Value: float64(seq), Build: fmt.Sprint(seq)},
			})
		}
	}
	if _, err := st.AddRegressPoints(ctx, ps); err != nil {
		b.Fatal(err)
	}
	return srv.URL, secret
}

// measure runs req in a b.Loop and reports p50 and p99 latency.
func measure(b *testing.B, req func() (*http.Response, error), want int) {
	b.Helper()
	var lat []time.Duration
	b.ReportAllocs()
	for b.Loop() {
		start := time.Now()
		resp, err := req()
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		lat = append(lat, time.Since(start))
		if resp.StatusCode != want {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

func BenchmarkAPI(b *testing.B) {
	url, token := benchEnv(b)
	get := func(path string) func() (*http.Response, error) {
		return func() (*http.Response, error) { return http.Get(url + path) }
	}
	b.Run("GetRun", func(b *testing.B) { measure(b, get("/v1/runs/1000"), 200) })
	b.Run("ListRuns50", func(b *testing.B) { measure(b, get("/v1/runs?limit=50"), 200) })
	b.Run("ListRunsFiltered", func(b *testing.B) { measure(b, get("/v1/runs?build=b7&state=queued&limit=50"), 200) })
	b.Run("ListDevices", func(b *testing.B) { measure(b, get("/v1/devices"), 200) })
	b.Run("Series2x100", func(b *testing.B) { measure(b, get("/v1/series?suite=smoke&metric=decode_tps&last=100"), 200) })
	body, _ := json.Marshal(map[string]any{"suite": "smoke", "build": "bench"})
	b.Run("TriggerRun", func(b *testing.B) {
		measure(b, func() (*http.Response, error) {
			req, _ := http.NewRequest("POST", url+"/v1/runs", bytes.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+token)
			req.Header.Set("Content-Type", "application/json")
			return http.DefaultClient.Do(req)
		}, 201)
	})
}

// BenchmarkArtifactTransfer measures a streamed 64 MiB upload (hash,
// fsync, rename) and a full download over real HTTP.
func BenchmarkArtifactTransfer(b *testing.B) {
	ctx := context.Background()
	st, err := store.Open(ctx, testenv.MigratedPostgresURL(b), store.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	files, err := artifact.New(artifact.Config{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	h, _, err := New(Deps{Store: st, Files: files, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	secret, _, _ := st.CreateAPIToken(ctx, "bench")
	data := make([]byte, 64<<20)
	for i := range data {
		data[i] = byte(i*31 + i>>9)
	}
	var sha string
	b.Run("Upload64MiB", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for i := 0; b.Loop(); i++ {
			data[0] = byte(i) // new content each time: no dedup shortcut
			req, _ := http.NewRequest("POST", srv.URL+"/v1/artifacts", bytes.NewReader(data))
			req.Header.Set("Authorization", "Bearer "+secret)
			resp, err := http.DefaultClient.Do(req)
			if err != nil || resp.StatusCode != http.StatusCreated {
				b.Fatalf("upload: %v %v", err, resp.Status)
			}
			var a Artifact
			json.NewDecoder(resp.Body).Decode(&a)
			resp.Body.Close()
			sha = a.SHA256
		}
	})
	b.Run("Download64MiB", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			resp, err := http.Get(srv.URL + "/v1/artifacts/" + sha)
			if err != nil || resp.StatusCode != http.StatusOK {
				b.Fatalf("download: %v", err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	})
}
