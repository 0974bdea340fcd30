package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/builds/buildstest"
	"github.com/lesfarm/lesfarm/coordinator/regress/monitor"
	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/internal/testenv"
	"github.com/lesfarm/lesfarm/protocol"
)

// bisectConfig is the smoke suite's config the bisection tests alert on.
const bisectConfig = "on-demand/budget=50%"

// bisectDevice registers an online linux/amd64 host of model
// emulated:phone-mid that runs exec builds.
func bisectDevice(t *testing.T, st *store.Store, id string) {
	t.Helper()
	ram := int64(8 << 30)
	if _, err := st.UpsertDevice(context.Background(), &store.UpsertDeviceParams{ID: id, TTL: time.Minute,
		Fingerprint: protocol.Fingerprint{Platform: "linux", DeviceModel: "emulated:phone-mid", RAMBytes: &ram, ExecPlatform: "linux/amd64"}}); err != nil {
		t.Fatal(err)
	}
}

// bisectRun claims dev's next run and completes it with one result per
// config of its job, decode(build) tok/s; nil when dev has no run.
func bisectRun(t *testing.T, st *store.Store, dev string, decode func(build string) float64) *store.Run {
	t.Helper()
	return completeNextRun(t, st, dev, -100, decode)
}

// completeNextRun is bisectRun for runs of priority want.
func completeNextRun(t *testing.T, st *store.Store, dev string, want int, decode func(build string) float64) *store.Run {
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
	if err := st.AckAssignment(ctx, g.Run.ID, g.Token); err != nil { // the agent starts it
		t.Fatal(err)
	}
	if g.Run.Priority != want {
		t.Fatalf("run %d of build %s has priority %d, want %d (a bisection's -100 is below nightly work)", g.Run.ID, g.Run.Build, g.Run.Priority, want)
	}
	j, err := st.GetJob(ctx, g.Run.JobID)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte("buildstest:" + g.Run.Build))
	res := &protocol.Result{RunID: g.Run.ID, Token: g.Token, DeviceID: dev, Outcome: protocol.OutcomeSucceeded,
		StartedAt: time.Now().Add(-90 * time.Second), FinishedAt: time.Now(),
		Provenance: &protocol.Provenance{Build: g.Run.Build, ExecutableSHA256: hex.EncodeToString(sum[:]), Platform: "linux/amd64"}}
	for _, c := range j.Spec.Expand() {
		d := decode(g.Run.Build)
		res.Configs = append(res.Configs, protocol.ConfigResult{ConfigIndex: c.Index, ConfigKey: c.Key, Valid: true, Repetitions: 1,
			DecodeTPS: protocol.Stat{N: 1, Mean: d, Median: d}, PrefillTPS: protocol.Stat{N: 1, Mean: 100, Median: 100},
			TTFTMS: protocol.Stat{N: 1, Mean: 50, Median: 50}})
	}
	r, err := st.CompleteRun(ctx, res)
	if err != nil {
		t.Fatalf("complete run %d: %v", g.Run.ID, err)
	}
	return r
}

// seedAlert records a decode regression alert of the smoke suite on
// emulated:phone-mid in lineage main at build builds[change], with points
// for every build (seq i+1) and the location range [lastGood, firstBad]
// (indexes into builds), and returns the group's id.
func seedAlert(t *testing.T, st *store.Store, builds []string, change, lastGood, firstBad int) int64 {
	t.Helper()
	ctx := context.Background()
	key := store.RegressSeries{Suite: "smoke", Config: bisectConfig, Metric: "decode_tps", DeviceModel: "emulated:phone-mid", OSMajor: "linux", Lineage: "main"}
	var ps []store.AddRegressPointParams
	for i, b := range builds {
		v := 10.0
		if i >= change {
			v = 9
		}
		ps = append(ps, store.AddRegressPointParams{Series: key, Point: store.RegressPoint{Seq: int64(i + 1), Value: v, Build: b}})
	}
	ids, err := st.AddRegressPoints(ctx, ps)
	if err != nil {
		t.Fatal(err)
	}
	na := store.NewAlert{SeriesID: ids[0], Seq: int64(change + 1), Direction: "regression", RelativeChange: -0.1, PValue: 0.001,
		BeforeMean: 10, AfterMean: 9, BeforeN: change, AfterN: len(builds) - change, Summary: "decode −10%"}
	if lastGood >= 0 {
		na.LastGoodSeq = int64(lastGood + 1)
	}
	na.FirstBadSeq = int64(firstBad + 1)
	res, err := st.RecordAlerts(ctx, &store.RecordAlertsParams{Suite: "smoke", Lineage: "main", Seq: int64(change + 1), Tolerance: 0,
		Alerts: []store.NewAlert{na},
		Classify: func(*store.AlertGroup) store.GroupClassification {
			return store.GroupClassification{Scope: "device", ScopeDetail: "emulated:phone-mid", Summary: "decode −10%"}
		}})
	if err != nil || res.Group == nil {
		t.Fatalf("record alert: %v %+v", err, res)
	}
	return res.Group.ID
}

// TestBisectFindsCulprit is the bisection end to end on the real API and
// PostgreSQL with a device that completes its runs as an agent would:
// eight registered builds whose decode drops 10% from build 5, an alert
// whose range spans all eight. POST /v1/alerts/{id}/bisect starts it at
// priority -100 on the alerting model; a second POST is 409; reading it
// advances it, step by step, to the culprit (build 5, last good build 4,
// both git shas, git log A..B) in at most ⌈log2 N⌉ + 2 steps, with the
// device time its runs took; the alert shows it; its runs never become
// series points. Midway a build is deleted (the step is aborted, the
// build skipped) and the device is lost (the step runs again on the
// model's other device, no sample counted twice).
func TestBisectFindsCulprit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(d *Deps) {
		d.Logger = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	})
	ctx := context.Background()
	builds := []string{"bis-1", "bis-2", "bis-3", "bis-4", "bis-5", "bis-6", "bis-7", "bis-8"}
	buildstest.Register(t, e.st, builds...)
	for i, b := range builds { // git shas, as a push with --git-sha records them
		if _, err := e.st.Pool().Exec(ctx, `UPDATE builds SET git_sha = $2 WHERE id = $1`, b, fmt.Sprintf("%040x", 0xabc000+i)); err != nil {
			t.Fatal(err)
		}
	}
	bisectDevice(t, e.st, "bis-host-a")
	bisectDevice(t, e.st, "bis-host-b")
	gid := seedAlert(t, e.st, builds, 4, 0, 7)
	pointsBefore := countPoints(t, e.st)

	start := func(body map[string]any) (*Bisection, *problem, int) {
		resp := e.api.Post(fmt.Sprintf("/v1/alerts/%d/bisect", gid), e.auth(), body)
		if resp.Code != http.StatusCreated {
			p := decodeProblem(t, resp.Header().Get("Content-Type"), resp.Body.Bytes())
			return nil, &p, resp.Code
		}
		var b Bisection
		if err := json.Unmarshal(resp.Body.Bytes(), &b); err != nil {
			t.Fatal(err)
		}
		return &b, nil, resp.Code
	}
	b, p, code := start(map[string]any{"budget": "4h"})
	if b == nil {
		t.Fatalf("start: %d %+v", code, p)
	}
	if b.State != "running" || len(b.Steps) != 1 || b.Steps[0].Kind != "verify" || b.Steps[0].BuildA != "bis-1" || b.Steps[0].BuildB != "bis-8" ||
		len(b.Builds) != 8 || b.BudgetSeconds != 4*3600 || b.DeviceID != "bis-host-a" {
		t.Fatalf("started: %+v", b)
	}
	if _, p, code := start(map[string]any{}); code != http.StatusConflict || !strings.Contains(p.Detail, fmt.Sprintf("bisection %d of alert group %d is running", b.ID, gid)) {
		t.Fatalf("second bisection of the group: %d %+v, want 409 naming the running one", code, p)
	}
	get := func() *Bisection {
		t.Helper()
		resp := e.api.Get(fmt.Sprintf("/v1/bisections/%d", b.ID))
		var out Bisection
		if resp.Code != http.StatusOK || json.Unmarshal(resp.Body.Bytes(), &out) != nil {
			t.Fatalf("get bisection: %d %s", resp.Code, resp.Body)
		}
		return &out
	}
	n := 0
	decode := func(build string) float64 {
		n++
		j := float64(n%5) * 0.01 // ±0.2% spread
		for i, x := range builds {
			if x == build && i >= 4 {
				return 9 + j
			}
		}
		return 10 + j
	}
	deleted, lost := false, false
	dev := "bis-host-a"
	// Complete what the bisection queues until it decides, waiting on its
	// state (bounded by time, not by a count of polls).
	testenv.Eventually(t, time.Minute, 10*time.Millisecond, func() error {
		for bisectRun(t, e.st, dev, decode) != nil {
		}
		cur := get()
		if cur.State != "running" {
			b = cur
			return nil
		}
		last := cur.Steps[len(cur.Steps)-1]
		if !deleted && last.Kind == "bisect" && last.State == "running" && last.BuildB != "bis-5" && last.BuildB != "bis-4" {
			// Delete the midpoint while its step runs: the step is
			// aborted and the build left out.
			if _, err := e.st.Pool().Exec(ctx, `DELETE FROM builds WHERE id = $1`, last.BuildB); err != nil {
				t.Fatal(err)
			}
			deleted = true
			got := get()
			if ab := got.Steps[len(got.Steps)-2]; ab.State != "aborted" || !strings.Contains(ab.Note, "was deleted mid-bisection") {
				t.Fatalf("after deleting %s: steps %+v", last.BuildB, got.Steps)
			}
			// The next step runs half its runs, then its device is lost.
			next := got.Steps[len(got.Steps)-1]
			for range next.Rounds {
				bisectRun(t, e.st, dev, decode)
			}
			if _, err := e.st.Pool().Exec(ctx, `UPDATE devices SET last_seen_at = now() - interval '1 hour' WHERE id = $1`, dev); err != nil {
				t.Fatal(err)
			}
			if ok, _, err := e.st.MarkDeviceLost(ctx, dev, 0); err != nil || !ok {
				t.Fatalf("mark lost: %v %v", ok, err)
			}
			lost = true
			got = get()
			ab := got.Steps[len(got.Steps)-2]
			if ab.State != "aborted" || ab.Step != next.Step || !strings.Contains(ab.Note, "device bis-host-a is lost mid-step: the step runs again on bis-host-b") ||
				got.Steps[len(got.Steps)-1].DeviceID != "bis-host-b" || got.Steps[len(got.Steps)-1].BuildB != ab.BuildB {
				t.Fatalf("after losing the device: %+v", got.Steps)
			}
			dev = "bis-host-b"
		}
		return errors.New("bisection still running")
	})
	if b.State != "culprit" || b.Culprit == nil {
		t.Fatalf("ended %s (%s), want culprit; steps %+v", b.State, b.Reason, b.Steps)
	}
	c := b.Culprit
	if c.FirstBad.ID != "bis-5" || c.LastGood.ID != "bis-4" || c.FirstBad.GitSHA != fmt.Sprintf("%040x", 0xabc004) ||
		c.GitLog != fmt.Sprintf("git log %040x..%040x", 0xabc003, 0xabc004) || c.Change > -0.09 || c.Change < -0.11 {
		t.Fatalf("culprit %+v", c)
	}
	if !deleted || !lost {
		t.Fatalf("the test never deleted a build (%v) or lost the device (%v): steps %+v", deleted, lost, b.Steps)
	}
	done, skipped := 0, 0
	for _, s := range b.Steps {
		if s.State == "done" {
			done++
			// Every sample of a decided step is one run of its own.
			if s.NA+s.NB != 2*s.Rounds || s.Runs["succeeded"] != 2*s.Rounds || s.P <= 0 || s.Summary == "" {
				t.Errorf("step %d: %d+%d samples, runs %v, rounds %d, p %v", s.Step, s.NA, s.NB, s.Runs, s.Rounds, s.P)
			}
		}
	}
	for _, x := range b.Builds {
		if x.State == "skipped" {
			skipped++
		}
	}
	if bound := bits.Len(uint(len(builds)-1)) + 2; done > bound || skipped != 1 {
		t.Fatalf("%d decided steps (bound %d), %d skipped builds: %+v", done, bound, skipped, b.Steps)
	}
	if b.DeviceSeconds <= 0 || b.Runs < 2*6*done || b.DeviceSeconds > b.BudgetSeconds {
		t.Fatalf("device time %.0f s over %d runs, budget %.0f s", b.DeviceSeconds, b.Runs, b.BudgetSeconds)
	}
	// The alert shows its bisection.
	resp := e.api.Get(fmt.Sprintf("/v1/alerts/%d", gid))
	var g AlertGroup
	if resp.Code != http.StatusOK || json.Unmarshal(resp.Body.Bytes(), &g) != nil || g.Bisection == nil || g.Bisection.ID != b.ID ||
		g.Bisection.Culprit == nil || g.Bisection.Culprit.FirstBad.ID != "bis-5" {
		t.Fatalf("alert: %d %s", resp.Code, resp.Body)
	}
	// Bisection runs are stored like any run, marked, and never feed the
	// series.
	mon, err := monitor.New(monitor.Config{Store: e.st})
	if err != nil {
		t.Fatal(err)
	}
	abRuns, err := e.st.ABRuns(ctx, b.Steps[len(b.Steps)-1].ABID)
	if err != nil || len(abRuns) == 0 {
		t.Fatal(err)
	}
	run, err := e.st.GetRun(ctx, abRuns[0].RunID)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := e.st.GetTrigger(ctx, run.TriggerID)
	if err != nil || tr.Source != fmt.Sprintf("bisect:%d", b.ID) {
		t.Fatalf("trigger of a bisection run: %+v %v", tr, err)
	}
	if _, err := mon.ObserveRun(ctx, run); err != nil {
		t.Fatal(err)
	}
	if got := countPoints(t, e.st); got != pointsBefore {
		t.Fatalf("series points %d → %d: a bisection run fed the series", pointsBefore, got)
	}
	// A step's comparison is the bisection's own: GET /v1/ab/{id} shows it
	// without advancing it.
	if resp := e.api.Get(fmt.Sprintf("/v1/ab/%d", b.Steps[0].ABID)); resp.Code != http.StatusOK || !strings.Contains(resp.Body.String(), `"state":"done"`) {
		t.Fatalf("ab of step 1: %d %s", resp.Code, resp.Body)
	}
	// Another bisection of the group may start now that it ended.
	if b2, p, code := start(map[string]any{"last_good": "bis-4", "first_bad": "bis-5"}); b2 == nil || b2.State != "running" {
		t.Fatalf("bisect again: %d %+v", code, p)
	} else if resp := e.api.Post(fmt.Sprintf("/v1/bisections/%d/cancel", b2.ID), e.auth(), map[string]any{"reason": "test"}); resp.Code != http.StatusOK ||
		!strings.Contains(resp.Body.String(), `"state":"cancelled"`) {
		t.Fatalf("cancel: %d %s", resp.Code, resp.Body)
	}
}

func countPoints(t *testing.T, st *store.Store) int {
	t.Helper()
	var n int
	if err := st.Pool().QueryRow(context.Background(), `SELECT count(*) FROM regress_points`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestBisectRefusesBadInput: each request the bisection cannot run is a
// one-line problem naming why: no good build before the alert (422), a
// range crossing lineages (422), an unregistered build (422), ends without
// an executable for the model's devices (422), an unknown group (404), a
// token without the trigger scope (403), no device of the model (409);
// a build without an executable in the middle of the range is skipped.
func TestBisectRefusesBadInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	builds := []string{"bad-1", "bad-2", "bad-3", "bad-4"}
	buildstest.Register(t, e.st, builds...)
	// An arm64-only build in main (appended: position 5), and one of
	// another lineage.
	arm := strings.Repeat("cd", 32)
	if _, err := e.st.PutArtifact(ctx, arm, 1, "arm"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []store.CreateBuildParams{{ID: "bad-arm", Lineage: "main"}, {ID: "rel-9", Lineage: "release-9"}} {
		p.PushedBy = "t"
		p.Executables = []store.Executable{{Platform: "linux/arm64", SHA256: arm, Size: 1}}
		if _, _, err := e.st.CreateBuild(ctx, &p); err != nil {
			t.Fatal(err)
		}
	}
	post := func(gid int64, body map[string]any, auth string) (int, problem, *Bisection) {
		resp := e.api.Post(fmt.Sprintf("/v1/alerts/%d/bisect", gid), auth, body)
		if resp.Code == http.StatusCreated {
			var b Bisection
			if err := json.Unmarshal(resp.Body.Bytes(), &b); err != nil {
				t.Fatal(err)
			}
			return resp.Code, problem{}, &b
		}
		return resp.Code, decodeProblem(t, resp.Header().Get("Content-Type"), resp.Body.Bytes()), nil
	}
	gid := seedAlert(t, e.st, builds, 2, 1, 2)
	if code, p, _ := post(gid, map[string]any{}, e.auth()); code != http.StatusConflict || !strings.Contains(p.Detail, "no online, undrained device of model emulated:phone-mid") {
		t.Fatalf("no device: %d %+v", code, p)
	}
	bisectDevice(t, e.st, "bad-host")
	// The first point of the series is the first bad build: nothing good
	// before it.
	key := store.RegressSeries{Suite: "smoke", Config: bisectConfig, Metric: "decode_tps", DeviceModel: "emulated:phone-mid", OSMajor: "linux", Lineage: "main"}
	readOnly, _, err := e.st.CreateAPITokenWith(ctx, &store.APITokenParams{Name: "reader", Scopes: []string{store.ScopeRead}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		gid  int64
		body map[string]any
		auth string
		code int
		want string
		loc  string
	}{
		{"unknown group", 999999, map[string]any{}, e.auth(), 404, "alert group 999999 does not exist", ""},
		{"read-only token", gid, map[string]any{}, "Authorization: Bearer " + readOnly, 403, "lacks the 'trigger' scope", ""},
		{"crosses lineages", gid, map[string]any{"last_good": "rel-9"}, e.auth(), 422,
			"the range crosses lineages: last good build rel-9 is of lineage release-9, first bad build bad-3 of lineage main", "body.last_good"},
		{"unregistered", gid, map[string]any{"first_bad": "bad-33"}, e.auth(), 422, `first bad build "bad-33" is not registered`, "body.first_bad"},
		{"not ordered", gid, map[string]any{"last_good": "bad-4", "first_bad": "bad-2"}, e.auth(), 422, "last good build bad-4 (position 4) is not before first bad build bad-2", "body.last_good"},
		{"missing for the platform", gid, map[string]any{"first_bad": "bad-arm"}, e.auth(), 422,
			"builds missing for the device's platform: no online device of model emulated:phone-mid can run bad-arm (its devices' platforms: linux/amd64)", "path.id"},
		{"bad budget", gid, map[string]any{"budget": "-1h"}, e.auth(), 422, "budget must be positive", "body.budget"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, p, _ := post(tc.gid, tc.body, tc.auth)
			if code != tc.code || !strings.Contains(p.Detail, tc.want) || strings.Contains(p.Detail, "\n") || (tc.loc != "" && !p.hasLocation(tc.loc)) {
				t.Fatalf("%d %+v, want %d %q at %q", code, p, tc.code, tc.want, tc.loc)
			}
		})
	}
	// No good build before the alert: an alert without a range whose
	// series (of its own) starts at its change.
	key.Config = "resident"
	own, err := e.st.AddRegressPoints(ctx, []store.AddRegressPointParams{{Series: key, Point: store.RegressPoint{Seq: 200, Value: 9, Build: "bad-4"}}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := e.st.RecordAlerts(ctx, &store.RecordAlertsParams{Suite: "smoke", Lineage: "main", Seq: 200, Tolerance: 0,
		Alerts:   []store.NewAlert{{SeriesID: own[0], Seq: 200, Direction: "regression", RelativeChange: -0.1, BeforeMean: 10, AfterMean: 9, BeforeN: 0, AfterN: 1}},
		Classify: func(*store.AlertGroup) store.GroupClassification { return store.GroupClassification{Scope: "device"} }})
	if err != nil || res.Group == nil {
		t.Fatal(err)
	}
	if code, p, _ := post(res.Group.ID, map[string]any{}, e.auth()); code != 422 || !strings.Contains(p.Detail, "has no good build before it") || !p.hasLocation("body.last_good") {
		t.Fatalf("no good build: %d %+v", code, p)
	}
	// A range with a build the device cannot run in its middle: skipped.
	buildstest.Register(t, e.st, "bad-5") // after bad-arm
	code, p, b := post(gid, map[string]any{"last_good": "bad-3", "first_bad": "bad-5"}, e.auth())
	if code != http.StatusCreated || len(b.Builds) != 4 || b.Builds[2].ID != "bad-arm" || b.Builds[2].State != "skipped" ||
		!strings.Contains(b.Builds[2].Skipped, "no executable for linux/amd64, the platform of bad-host") {
		t.Fatalf("range over an arm64-only build: %d %+v %+v", code, p, b)
	}
	// bad-4, the only candidate left, is deleted before its step: the
	// culprit is bad-5 after bad-3, naming both builds between.
	if _, err := e.st.Pool().Exec(ctx, `DELETE FROM builds WHERE id = 'bad-4'`); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, 10*time.Millisecond, func() error {
		for bisectRun(t, e.st, "bad-host", func(build string) float64 {
			if build == "bad-5" {
				return 9
			}
			return 10
		}) != nil {
		}
		resp := e.api.Get(fmt.Sprintf("/v1/bisections/%d", b.ID))
		if err := json.Unmarshal(resp.Body.Bytes(), b); err != nil {
			t.Fatal(err)
		}
		if b.State == "running" {
			return errors.New("bisection still running")
		}
		return nil
	})
	if b.State != "culprit" || b.Culprit.FirstBad.ID != "bad-5" || b.Culprit.LastGood.ID != "bad-3" || len(b.Steps) != 1 ||
		!strings.Contains(b.Reason, "2 build(s) between them could not be measured: bad-4 (deleted mid-bisection), bad-arm (no executable") {
		t.Fatalf("after deleting bad-4: %s %q %+v", b.State, b.Reason, b.Steps)
	}
}

// testWriter logs through t.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}
