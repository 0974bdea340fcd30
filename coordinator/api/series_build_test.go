package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/lesfarm/lesfarm/coordinator/store"
)

// pushBuild registers an exec build of lineage main (after after, when
// set) with one linux/arm64 executable and returns that executable's
// sha256.
func pushBuild(t *testing.T, st *store.Store, id, after, gitSHA string) string {
	t.Helper()
	ctx := context.Background()
	sum := sha256.Sum256([]byte("series-build:" + id))
	sha := hex.EncodeToString(sum[:])
	if _, err := st.PutArtifact(ctx, sha, 1, id); err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.CreateBuild(ctx, &store.CreateBuildParams{ID: id, After: after, GitSHA: gitSHA, PushedBy: "test",
		Executables: []store.Executable{{Platform: "linux/arm64", SHA256: sha, Size: 1}}}); err != nil {
		t.Fatalf("push %s: %v", id, err)
	}
	return sha
}

// TestSeriesBuildOrder: GET /v1/series returns each series' points in
// build order (the build's position in the lineage), not in the order the
// builds ran, with the build's git sha and the executable of the point's
// run; a point of a label that is not a registered build sits after the
// newest build that had run before it.
func TestSeriesBuildOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	pushBuild(t, e.st, "b1", "", "1111111")
	pushBuild(t, e.st, "b2", "", "2222222")
	pushBuild(t, e.st, "b3", "", "3333333")
	fixSHA := pushBuild(t, e.st, "b1-fix", "b1", "4444444") // position 2: b2 and b3 move up
	// b1-fix ran last (seq 4) and has a run whose result names its executable.
	resp := e.api.Post("/v1/runs", e.auth(), map[string]any{"suite": "smoke", "build": "b1-fix"})
	var set RunSet
	if err := json.Unmarshal(resp.Body.Bytes(), &set); err != nil || len(set.Runs) != 1 {
		t.Fatalf("trigger: %d %s", resp.Code, resp.Body)
	}
	runID := set.Runs[0].ID
	if _, err := e.st.Pool().Exec(ctx, `INSERT INTO results (run_id, config_index, config_key, suite, build, device_id, device_model,
		decode_tps_mean, valid, executable_sha256) VALUES ($1, 0, 'resident', 'smoke', 'b1-fix', 'd', 'Pixel 8', 9, true, $2)`, runID, fixSHA); err != nil {
		t.Fatal(err)
	}
	var ps []store.AddRegressPointParams
	for i, b := range []string{"b1", "b2", "b3", "b1-fix", "legacy-7"} {
		run := fmt.Sprint(1000 + i)
		if b == "b1-fix" {
			run = fmt.Sprint(runID)
		}
		ps = append(ps, store.AddRegressPointParams{
			Series: store.RegressSeries{Suite: "smoke", Config: "resident", Metric: "decode_tps", DeviceModel: "Pixel 8", OSMajor: "14", Lineage: "main"},
			Point:  store.RegressPoint{Seq: int64(i + 1), RunKey: run, Value: float64(i + 1), N: 1, Build: b}})
	}
	if _, err := e.st.AddRegressPoints(ctx, ps); err != nil {
		t.Fatal(err)
	}
	resp = e.api.Get("/v1/series?suite=smoke&metric=decode_tps")
	if resp.Code != http.StatusOK {
		t.Fatalf("series: %d %s", resp.Code, resp.Body)
	}
	var out struct {
		Series []SeriesWithPoints `json:"series"`
	}
	if err := json.Unmarshal(resp.Body.Bytes(), &out); err != nil || len(out.Series) != 1 {
		t.Fatalf("series %v %s", err, resp.Body)
	}
	var got []string
	for _, p := range out.Series[0].Points {
		got = append(got, fmt.Sprintf("%s@%d/seq%d/%s", p.Build, p.BuildPosition, p.Seq, p.GitSHA))
	}
	want := "b1@1/seq1/1111111 b1-fix@2/seq4/4444444 b2@3/seq2/2222222 b3@4/seq3/3333333 legacy-7@0/seq5/"
	if strings.Join(got, " ") != want {
		t.Fatalf("points %s\nwant   %s", strings.Join(got, " "), want)
	}
	for _, p := range out.Series[0].Points {
		if wantExe := map[bool]string{true: fixSHA}[p.Build == "b1-fix"]; p.ExecutableSHA256 != wantExe {
			t.Errorf("%s: executable %q, want %q", p.Build, p.ExecutableSHA256, wantExe)
		}
	}
	if !strings.Contains(resp.Body.String(), `"executable_sha256":"`+fixSHA+`"`) || !strings.Contains(resp.Body.String(), `"build_position":2`) {
		t.Errorf("wire form lacks build_position or executable_sha256: %s", resp.Body)
	}
	// Downsampled, the buckets are consecutive builds in build order.
	resp = e.api.Get("/v1/series?suite=smoke&metric=decode_tps&points=2")
	if err := json.Unmarshal(resp.Body.Bytes(), &out); err != nil || len(out.Series) != 1 || len(out.Series[0].Points) != 2 {
		t.Fatalf("points=2: %v %s", err, resp.Body)
	}
	if p := out.Series[0].Points[0]; p.Build != "b1-fix" || p.Bucket == nil || p.Bucket.SeqFirst != 1 || p.Bucket.Min != 1 || p.Bucket.Max != 4 {
		t.Errorf("first bucket %+v %+v, want b1 and b1-fix (values 1 and 4)", p, p.Bucket)
	}
}
