package api_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/api"
	"github.com/lesfarm/lesfarm/coordinator/builds/buildstest"
	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/internal/testenv"
	"github.com/lesfarm/lesfarm/protocol"
)

// fakeABAgent plays an exec agent on device dev until ctx ends: it claims
// the device's runs in placement order and completes each with one valid
// config whose decode rate is decode(build); a build in fail ends
// build_failed.
func fakeABAgent(ctx context.Context, t *testing.T, st *store.Store, dev string, decode func(string) float64, fail map[string]bool) {
	for ctx.Err() == nil {
		cands, err := st.Candidates(ctx, &store.CandidatesParams{Device: &store.PlacementDevice{ID: dev, Platform: "linux",
			DeviceModel: "emulated:phone-mid", RAMBytes: 8 << 30, ExecPlatform: "linux/amd64"}})
		if err != nil || len(cands) == 0 {
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
			continue
		}
		g, err := st.ClaimRun(ctx, &store.ClaimRunParams{DeviceID: dev, RunIDs: []int64{cands[0].RunID}, LeaseTTL: time.Minute, Coordinator: "t"})
		if err != nil {
			continue
		}
		sum := sha256.Sum256([]byte("buildstest:" + g.Run.Build))
		res := &protocol.Result{RunID: g.Run.ID, Token: g.Token, DeviceID: dev, Outcome: protocol.OutcomeSucceeded,
			Provenance: &protocol.Provenance{Build: g.Run.Build, ExecutableSHA256: hex.EncodeToString(sum[:]), Platform: "linux/amd64"}}
		if fail[g.Run.Build] {
			res.Outcome, res.Error = protocol.OutcomeBuildFailed, "runner: panic: index out of range"
		} else {
			d := decode(g.Run.Build)
			res.Configs = []protocol.ConfigResult{{ConfigKey: "mode=lookahead", Valid: true, Repetitions: 3,
				DecodeTPS: protocol.Stat{N: 3, Mean: d, Median: d}, PrefillTPS: protocol.Stat{N: 3, Mean: 100, Median: 100},
				TTFTMS: protocol.Stat{N: 3, Mean: 50, Median: 50}}}
		}
		if _, err := st.CompleteRun(ctx, res); err != nil && ctx.Err() == nil && !cancelledMeanwhile(ctx, st, g.Run.ID, err) {
			t.Errorf("complete run %d: %v", g.Run.ID, err)
		}
	}
}

// cancelledMeanwhile says whether CompleteRun's err is the fencing of a
// run that was cancelled while the fake agent ran it: a comparison that
// failed (a build that does not run) cancels its remaining runs, and a
// real agent learns it from its next heartbeat.
func cancelledMeanwhile(ctx context.Context, st *store.Store, id int64, err error) bool {
	if !errors.Is(err, store.ErrStaleToken) {
		return false
	}
	r, gerr := st.GetRun(ctx, id)
	return gerr == nil && r.State == store.RunCancelled
}

// TestCLIRunBaseline drives `lesfarm run --baseline --wait` against the
// API on a real database with a fake exec agent: a 10% slower build exits
// 1 naming config, metric, change and interval (and the JUnit, JSON and
// summary reports carry the verdict); the build against itself exits 0;
// a build that fails exits 1 saying "build failed", with --baseline and
// without; an unknown baseline or one of another lineage exits 2 with one
// line; a run no online device can run shows why it waits.
func TestCLIRunBaseline(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dbURL := testenv.MigratedPostgresURL(t)
	st, err := store.Open(ctx, dbURL, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	h, _, err := api.New(api.Deps{Store: st, Logger: slog.New(slog.DiscardHandler), WaitPoll: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	token, _, err := st.CreateAPIToken(ctx, "ci")
	if err != nil {
		t.Fatal(err)
	}
	server := []string{"--server", srv.URL, "--token", token}
	buildstest.Register(t, st, "cab-1", "cab-2", "cab-3")
	sha := strings.Repeat("cd", 32)
	if _, err := st.PutArtifact(ctx, sha, 1, "arm"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []*store.CreateBuildParams{
		{ID: "cab-rel", Lineage: "release-2", PushedBy: "t", Executables: []store.Executable{{Platform: "linux/amd64", SHA256: sha, Size: 1}}},
		{ID: "cab-arm", PushedBy: "t", Executables: []store.Executable{{Platform: "android/arm64", SHA256: sha, Size: 1}}},
	} {
		if _, _, err := st.CreateBuild(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	ram := int64(8 << 30)
	if _, err := st.UpsertDevice(ctx, &store.UpsertDeviceParams{ID: "cab-host", TTL: time.Hour,
		Fingerprint: protocol.Fingerprint{Platform: "linux", DeviceModel: "emulated:phone-mid", RAMBytes: &ram, ExecPlatform: "linux/amd64"}}); err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	jitter := func() float64 { return float64(n.Add(1)%5) * 0.01 }
	go fakeABAgent(ctx, t, st, "cab-host", func(b string) float64 {
		if b == "cab-2" {
			return 9 + jitter() // 10% slower
		}
		return 10 + jitter()
	}, map[string]bool{"cab-3": true})

	dir := t.TempDir()
	junit, summary := filepath.Join(dir, "junit.xml"), filepath.Join(dir, "summary.md")
	for _, tc := range []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"unknown baseline", []string{"--build", "cab-2", "--baseline", "cab-9"}, 2, []string{`run: baseline build "cab-9" is not registered; nearest: `}},
		{"other lineage", []string{"--build", "cab-2", "--baseline", "cab-rel"}, 2, []string{`baseline "cab-rel" is of lineage release-2, build "cab-2" of lineage main`}},
		{"regression", []string{"--build", "cab-2", "--baseline", "cab-1", "--max-rounds", "12", "--junit", junit, "--summary", summary},
			1, []string{"A/B comparison", "(baseline cab-1, round 1): succeeded on cab-host", "regression: cab-host mode=lookahead decode_tps: regression, ", ", change -10.", "% interval), p "}},
		{"A/A", []string{"--build", "cab-1", "--baseline", "cab-1", "--max-rounds", "12"}, 0, []string{"ok: same: 3 comparison(s), none changed by 2.0% or more"}},
		{"build fails in A/B", []string{"--build", "cab-3", "--baseline", "auto"}, 1, []string{"build failed: run ", "(build cab-3) on cab-host: runner: panic: index out of range"}},
		{"build fails", []string{"--build", "cab-3", "--fanout", "--devices", "platform=linux"}, 1, []string{": build failed on cab-host: runner: panic: index out of range"}},
		{"no device can run it", []string{"--build", "cab-arm", "--timeout", "2s"}, 1, []string{"run ", ": queued — no online device can run it"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"run", "--suite", "smoke", "--wait", "--alert-grace", "0s"}, tc.args...)
			if !strings.Contains(strings.Join(tc.args, " "), "--timeout") {
				args = append(args, "--timeout", "60s")
			}
			code, out, errOut := lesfarm(t, append(args, server...)...)
			all := out + errOut
			for _, w := range tc.want {
				if code != tc.code || !strings.Contains(all, w) {
					t.Fatalf("exit %d (want %d), want %q in\nstdout:\n%s\nstderr:\n%s", code, tc.code, w, out, errOut)
				}
			}
			if tc.code == 2 && strings.Count(strings.TrimSpace(errOut), "\n") > 0 {
				t.Fatalf("refusal is not one line: %q", errOut)
			}
		})
	}
	for path, want := range map[string]string{junit: `type="ab-regression"`, summary: "❌ regression"} {
		b, err := os.ReadFile(path)
		if err != nil || !strings.Contains(string(b), want) {
			t.Fatalf("%s lacks %q:\n%s", path, want, b)
		}
	}
}
