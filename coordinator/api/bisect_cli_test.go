package api_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"math"
	"net/http/httptest"
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

// fakeBisectAgent plays an exec agent on device dev until ctx ends: it
// claims, starts and completes the device's runs in placement order, each
// with one valid result per config of its job at decode(build) tok/s.
func fakeBisectAgent(ctx context.Context, t *testing.T, st *store.Store, dev string, decode func(string) float64) {
	for ctx.Err() == nil {
		cands, err := st.Candidates(ctx, &store.CandidatesParams{Device: &store.PlacementDevice{ID: dev, Platform: "linux",
			DeviceModel: "emulated:phone-mid", RAMBytes: 8 << 30, ExecPlatform: "linux/amd64"}})
		if err != nil || len(cands) == 0 {
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		g, err := st.ClaimRun(ctx, &store.ClaimRunParams{DeviceID: dev, RunIDs: []int64{cands[0].RunID}, LeaseTTL: time.Minute, Coordinator: "t"})
		if err != nil || st.AckAssignment(ctx, g.Run.ID, g.Token) != nil {
			continue
		}
		j, err := st.GetJob(ctx, g.Run.JobID)
		if err != nil {
			continue
		}
		sum := sha256.Sum256([]byte("buildstest:" + g.Run.Build))
		res := &protocol.Result{RunID: g.Run.ID, Token: g.Token, DeviceID: dev, Outcome: protocol.OutcomeSucceeded,
			Provenance: &protocol.Provenance{Build: g.Run.Build, ExecutableSHA256: hex.EncodeToString(sum[:]), Platform: "linux/amd64"}}
		for _, c := range j.Spec.Expand() {
			d := decode(g.Run.Build)
			res.Configs = append(res.Configs, protocol.ConfigResult{ConfigIndex: c.Index, ConfigKey: c.Key, Valid: true, Repetitions: 1,
				DecodeTPS: protocol.Stat{N: 1, Mean: d, Median: d}, PrefillTPS: protocol.Stat{N: 1, Mean: 100, Median: 100},
				TTFTMS: protocol.Stat{N: 1, Mean: 50, Median: 50}})
		}
		if _, err := st.CompleteRun(ctx, res); err != nil && ctx.Err() == nil {
			t.Errorf("complete run %d: %v", g.Run.ID, err)
		}
	}
}

// cliAlert records a −10% decode alert of the smoke suite on
// emulated:phone-mid in lineage main whose range spans builds, and returns
// its group id; its points are at seqs from base on.
func cliAlert(t *testing.T, st *store.Store, base int64, config string, builds []string) int64 {
	t.Helper()
	ctx := context.Background()
	key := store.RegressSeries{Suite: "smoke", Config: config, Metric: "decode_tps", DeviceModel: "emulated:phone-mid", OSMajor: "linux", Lineage: "main"}
	var ps []store.AddRegressPointParams
	for i, b := range builds {
		ps = append(ps, store.AddRegressPointParams{Series: key, Point: store.RegressPoint{Seq: base + int64(i), Value: 10, Build: b}})
	}
	ids, err := st.AddRegressPoints(ctx, ps)
	if err != nil {
		t.Fatal(err)
	}
	first := ps[0].Point.Seq
	res, err := st.RecordAlerts(ctx, &store.RecordAlertsParams{Suite: "smoke", Lineage: "main", Seq: first + 1, Tolerance: 0,
		Alerts: []store.NewAlert{{SeriesID: ids[0], Seq: first + 1, Direction: "regression", RelativeChange: -0.1, PValue: 0.001, BeforeMean: 10, AfterMean: 9,
			BeforeN: 1, AfterN: len(builds) - 1, LastGoodSeq: first, FirstBadSeq: first + int64(len(builds)) - 1}},
		Classify: func(*store.AlertGroup) store.GroupClassification { return store.GroupClassification{Scope: "device"} }})
	if err != nil || res.Group == nil {
		t.Fatalf("record alert: %v %+v", err, res)
	}
	return res.Group.ID
}

// TestCLIBisect drives `lesfarm bisect --wait` against the API on a real
// database with a fake exec agent: over six builds whose decode drops 10%
// at cli-4 it prints each step and exits 0 naming the culprit with its
// git log range and the device time; builds that do not differ end not
// reproduced (exit 0, said so); a second bisect of a running one follows
// it; an unknown group exits 2 in one line; a change drowned in noise
// within a one-round budget exits 1 as ambiguous.
func TestCLIBisect(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := store.Open(ctx, testenv.MigratedPostgresURL(t), store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	h, _, err := api.New(api.Deps{Store: st, Logger: slog.New(slog.DiscardHandler)})
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
	builds := []string{"cli-1", "cli-2", "cli-3", "cli-4", "cli-5", "cli-6"}
	buildstest.Register(t, st, builds...)
	for i, b := range builds {
		if _, err := st.Pool().Exec(ctx, `UPDATE builds SET git_sha = $2 WHERE id = $1`, b, fmt.Sprintf("%040x", 0xc0de00+i)); err != nil {
			t.Fatal(err)
		}
	}
	ram := int64(8 << 30)
	if _, err := st.UpsertDevice(ctx, &store.UpsertDeviceParams{ID: "cli-host", TTL: time.Hour,
		Fingerprint: protocol.Fingerprint{Platform: "linux", DeviceModel: "emulated:phone-mid", RAMBytes: &ram, ExecPlatform: "linux/amd64"}}); err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	noisy := atomic.Bool{}
	go fakeBisectAgent(ctx, t, st, "cli-host", func(b string) float64 {
		k := n.Add(1)
		if noisy.Load() { // ±30%: nothing can be told apart in one round
			return 10 * (1 + 0.3*math.Sin(float64(k)))
		}
		j := float64(k%5) * 0.01
		if b >= "cli-4" {
			return 9 + j
		}
		return 10 + j
	})
	culprit := cliAlert(t, st, 100, "on-demand/budget=50%", builds)
	same := cliAlert(t, st, 200, "resident", builds[:3])
	noise := cliAlert(t, st, 300, "on-demand/budget=50%", builds[3:])
	run := func(args ...string) (int, string) {
		code, out, errOut := lesfarm(t, append(append([]string{"bisect", "--poll", "20ms", "--timeout", "60s"}, args...), server...)...)
		return code, out + errOut
	}
	code, text := run(fmt.Sprint(culprit), "--wait")
	for _, w := range []string{
		fmt.Sprintf("bisection 1 of alert group %d: on-demand/budget=50%% decode_tps on emulated:phone-mid (device cli-host), 6 builds of lineage main from cli-1 (good) to cli-6 (bad)", culprit),
		"step 1 (verify, cli-6 vs cli-1 on cli-host): reproduced: cli-6 differs from cli-1",
		"(bisect, cli-3 vs cli-1 on cli-host): cli-3 is good", "cli-4 is bad",
		fmt.Sprintf("culprit: first bad build cli-4 (%040x), last good build cli-3 (%040x): decode_tps -10.", 0xc0de03, 0xc0de02),
		fmt.Sprintf("  git log %040x..%040x", 0xc0de02, 0xc0de03), "device time ",
	} {
		if code != 0 || !strings.Contains(text, w) {
			t.Fatalf("culprit: exit %d, want 0 with %q in\n%s", code, w, text)
		}
	}
	if code, text = run(fmt.Sprint(same), "--wait"); code != 0 || !strings.Contains(text, "not reproduced: the first bad build does not differ") {
		t.Fatalf("same builds: exit %d\n%s", code, text)
	}
	if code, text = run("999999"); code != 2 || !strings.Contains(text, "bisect: alert group 999999 does not exist") || strings.Count(strings.TrimSpace(text), "\n") > 0 {
		t.Fatalf("unknown group: exit %d %q", code, text)
	}
	noisy.Store(true)
	if code, text = run(fmt.Sprint(noise), "--max-rounds", "6"); code != 0 || !strings.Contains(text, "it runs on the coordinator") {
		t.Fatalf("start without --wait: exit %d\n%s", code, text)
	}
	if code, text = run(fmt.Sprint(noise), "--wait"); code != 1 || !strings.Contains(text, "is running already: following it") ||
		!strings.Contains(text, "bisect: ambiguous: the last good and first bad builds could not be told apart") {
		t.Fatalf("noise: exit %d, want 1 as ambiguous\n%s", code, text)
	}
}
