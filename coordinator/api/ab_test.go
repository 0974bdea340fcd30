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
	"time"

	"github.com/lesfarm/lesfarm/coordinator/builds/buildstest"
	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/internal/testenv"
	"github.com/lesfarm/lesfarm/protocol"
)

// abDevice registers an online linux/amd64 host that runs exec builds.
func abDevice(t *testing.T, st *store.Store, id string) {
	t.Helper()
	ram := int64(8 << 30)
	if _, err := st.UpsertDevice(context.Background(), &store.UpsertDeviceParams{ID: id, TTL: time.Minute,
		Fingerprint: protocol.Fingerprint{Platform: "linux", DeviceModel: "emulated:phone-mid", RAMBytes: &ram, ExecPlatform: "linux/amd64"}}); err != nil {
		t.Fatal(err)
	}
}

// abStep claims the device's next run and completes it, its decode rate
// given by decode(build, n) (n counts the build's runs so far); a build
// named in fail ends build_failed. It returns the run, or nil when the
// device has no run left.
func abStep(t *testing.T, st *store.Store, dev string, decode func(build string) float64, fail string) *store.Run {
	t.Helper()
	ctx := context.Background()
	cands, err := st.Candidates(ctx, &store.CandidatesParams{Device: &store.PlacementDevice{ID: dev, Platform: "linux",
		DeviceModel: "emulated:phone-mid", RAMBytes: 8 << 30, ExecPlatform: "linux/amd64"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(cands) == 0 {
		return nil
	}
	g, err := st.ClaimRun(ctx, &store.ClaimRunParams{DeviceID: dev, RunIDs: []int64{cands[0].RunID}, LeaseTTL: time.Minute, Coordinator: "t"})
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte("buildstest:" + g.Run.Build)) // buildstest.Register's executable
	res := &protocol.Result{RunID: g.Run.ID, Token: g.Token, DeviceID: dev, Outcome: protocol.OutcomeSucceeded,
		Provenance: &protocol.Provenance{Build: g.Run.Build, ExecutableSHA256: hex.EncodeToString(sum[:]), Platform: "linux/amd64"}}
	if g.Run.Build == fail {
		res.Outcome, res.Error = protocol.OutcomeBuildFailed, "runner exited: exit status 2"
	} else {
		d := decode(g.Run.Build)
		res.Configs = []protocol.ConfigResult{{ConfigKey: "mode=lookahead", Valid: true, Repetitions: 3,
			DecodeTPS: protocol.Stat{N: 3, Mean: d, Median: d}, PrefillTPS: protocol.Stat{N: 3, Mean: 100, Median: 100},
			TTFTMS: protocol.Stat{N: 3, Mean: 50, Median: 50}}}
	}
	r, err := st.CompleteRun(ctx, res)
	if err != nil {
		t.Fatalf("complete run %d: %v", g.Run.ID, err)
	}
	return r
}

// TestABGate: POST /v1/runs with a baseline refuses an unknown baseline,
// one of another lineage and "auto" without earlier results, each with a
// one-line 422 at body.baseline; a comparison decides once its runs end —
// a 10% slower build is a regression on decode, the same build against
// itself is the same after adding rounds, a build that fails ends the
// comparison failed and cancels its other runs.
func TestABGate(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	buildstest.Register(t, e.st, "abg-1", "abg-2", "abg-3")
	if _, err := e.st.PutArtifact(ctx, strings.Repeat("ab", 32), 1, "rel"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.st.CreateBuild(ctx, &store.CreateBuildParams{ID: "rel-1", Lineage: "release-1", PushedBy: "t",
		Executables: []store.Executable{{Platform: "linux/amd64", SHA256: strings.Repeat("ab", 32), Size: 1}}}); err != nil {
		t.Fatal(err)
	}
	abDevice(t, e.st, "abg-host")
	for _, tc := range []struct {
		name, build, baseline, want string
	}{
		{"unknown baseline", "abg-2", "abg-9", `baseline build "abg-9" is not registered; nearest:`},
		{"other lineage", "abg-2", "rel-1", `baseline "rel-1" is of lineage release-1, build "abg-2" of lineage main: compare builds of one lineage`},
		{"auto without results", "abg-2", "auto", `no build before "abg-2" in lineage main has results in suite smoke; name the baseline`},
		{"no build", "", "abg-1", "a baseline needs a build to compare with it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := e.api.Post("/v1/runs", e.auth(), map[string]any{"suite": "smoke", "build": tc.build, "baseline": tc.baseline})
			p := decodeProblem(t, resp.Header().Get("Content-Type"), resp.Body.Bytes())
			if resp.Code != http.StatusUnprocessableEntity || !strings.HasPrefix(p.Detail, tc.want) || strings.Contains(p.Detail, "\n") || !p.hasLocation("body.baseline") {
				t.Fatalf("%d %+v, want 422 at body.baseline %q", resp.Code, p, tc.want)
			}
		})
	}
	trigger := func(build, baseline string, maxRounds int) *ABComparison {
		t.Helper()
		resp := e.api.Post("/v1/runs", e.auth(), map[string]any{"suite": "smoke", "build": build, "baseline": baseline, "max_rounds": maxRounds})
		var out TriggerResult
		if resp.Code != http.StatusCreated || json.Unmarshal(resp.Body.Bytes(), &out) != nil || out.AB == nil {
			t.Fatalf("trigger %s vs %s: %d %s", build, baseline, resp.Code, resp.Body)
		}
		return out.AB
	}
	get := func(id int64) *ABComparison {
		t.Helper()
		resp := e.api.Get(fmt.Sprintf("/v1/ab/%d", id))
		var ab ABComparison
		if resp.Code != http.StatusOK || json.Unmarshal(resp.Body.Bytes(), &ab) != nil {
			t.Fatalf("get ab %d: %d %s", id, resp.Code, resp.Body)
		}
		return &ab
	}
	// drain runs the device until the comparison is done, reading it (which
	// advances it) whenever the device has nothing left.
	drain := func(id int64, decode func(string) float64, fail string) *ABComparison {
		t.Helper()
		var ab *ABComparison
		testenv.Eventually(t, time.Minute, 10*time.Millisecond, func() error {
			for abStep(t, e.st, "abg-host", decode, fail) != nil {
			}
			if ab = get(id); ab.State != store.ABDone {
				return fmt.Errorf("comparison %d is %s", id, ab.State)
			}
			return nil
		})
		return ab
	}
	n := 0
	jitter := func() float64 { n++; return float64(n%5) * 0.01 } // deterministic spread of ±0.2%

	ab := trigger("abg-2", "abg-1", 12)
	if len(ab.Runs) != 2*6 || ab.Runs[0].Side != "a" || ab.Runs[1].Side != "b" || ab.Runs[2].Side != "b" || ab.MinEffect != 0.02 {
		t.Fatalf("comparison %+v: want 6 rounds of 2 runs in ABBA order", ab)
	}
	got := drain(ab.ID, func(b string) float64 {
		if b == "abg-2" {
			return 9 + jitter()
		}
		return 10 + jitter()
	}, "")
	if got.Verdict != "regression" || !strings.Contains(got.Summary, "decode_tps -10.") || got.Rounds != 6 {
		t.Fatalf("10%% slower: verdict %s %q after %d rounds", got.Verdict, got.Summary, got.Rounds)
	}

	// The default baseline is now abg-1 for abg-3 (the newest earlier build with results is abg-2).
	if ab := trigger("abg-3", "auto", 0); ab.Baseline != "abg-2" {
		t.Fatalf("auto baseline %s, want abg-2", ab.Baseline)
	} else {
		got = drain(ab.ID, func(string) float64 { return 10 + jitter() }, "abg-3")
		if got.Verdict != "failed" || len(got.Problems) == 0 || !strings.HasPrefix(got.Problems[0], "build failed: run ") {
			t.Fatalf("failing build: %s %v", got.Verdict, got.Problems)
		}
	}

	aa := trigger("abg-1", "abg-1", 12)
	got = drain(aa.ID, func(string) float64 { return 10 + jitter() }, "")
	if got.Verdict != "same" {
		t.Fatalf("A/A: verdict %s %q after %d rounds", got.Verdict, got.Summary, got.Rounds)
	}
	if resp := e.api.Get("/v1/ab?build=abg-1"); resp.Code != http.StatusOK || !strings.Contains(resp.Body.String(), `"verdict":"same"`) {
		t.Fatalf("list: %d %s", resp.Code, resp.Body)
	}
}
