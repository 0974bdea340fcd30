package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/bisect"
	"github.com/lesfarm/lesfarm/coordinator/builds/buildstest"
	"github.com/lesfarm/lesfarm/coordinator/nightly"
	"github.com/lesfarm/lesfarm/coordinator/regress/monitor"
	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/internal/testenv"
)

// TestAutoBisectPerSchedule is "bisect: auto" end to end: a schedule
// created on the API with bisect auto fires nightly runs of the newest
// build (the scheduler's own trigger, its clock stepped a day at a time);
// a device completes them, the regression monitor turns them into series
// and raises an alert when decode drops 10% at one build. The bisector's
// loop then starts one bisection of the group by itself (requested by the
// schedule, at priority -100: the next nightly run is served first), which
// ends at the culprit; a later sweep starts no second one. A bisect mode
// other than off or auto is a 422 at body.bisect.
func TestAutoBisectPerSchedule(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	bisectDevice(t, e.st, "auto-host")

	resp := e.api.Post("/v1/schedules", e.auth(), map[string]any{"name": "bad-mode", "cron": "0 2 * * *", "suite": "smoke", "bisect": "sometimes"})
	if p := decodeProblem(t, resp.Header().Get("Content-Type"), resp.Body.Bytes()); resp.Code != http.StatusUnprocessableEntity || !p.hasLocation("body.bisect") {
		t.Fatalf("bisect sometimes: %d %+v, want 422 at body.bisect", resp.Code, p)
	}
	var sc, off Schedule
	resp = e.api.Post("/v1/schedules", e.auth(), map[string]any{"name": "nightly-off", "cron": "0 3 * * *", "suite": "smoke", "build": "latest", "enabled": false})
	if resp.Code != http.StatusCreated || json.Unmarshal(resp.Body.Bytes(), &off) != nil || off.Bisect != "off" {
		t.Fatalf("schedule without bisect: %d %s, want bisect off", resp.Code, resp.Body)
	}
	resp = e.api.Post("/v1/schedules", e.auth(), map[string]any{"name": "nightly-auto", "cron": "0 2 * * *", "suite": "smoke", "build": "latest", "priority": 10, "bisect": "auto"})
	if resp.Code != http.StatusCreated || json.Unmarshal(resp.Body.Bytes(), &sc) != nil || sc.Bisect != "auto" {
		t.Fatalf("schedule: %d %s", resp.Code, resp.Body)
	}

	clock := sc.NextFireAt
	sched, err := nightly.New(nightly.Config{Store: e.st, Trigger: nightly.StoreTrigger(e.st), Now: func() time.Time { return clock },
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	mon, err := monitor.New(monitor.Config{Store: e.st, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	bis, err := bisect.New(bisect.Config{Store: e.st, Poll: 20 * time.Millisecond, AutoPoll: 20 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := bis.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(bis.Stop)

	const change = 12
	n := 0
	decode := func(build string) float64 {
		n++
		var i int
		if _, err := fmt.Sscanf(build, "auto-%d", &i); err != nil {
			t.Fatalf("build %q", build)
		}
		j := float64(n%5) * 0.01
		if i >= change {
			return 9 + j
		}
		return 10 + j
	}
	// nightlyAt registers build auto-i, fires the schedule's occurrence
	// and completes its runs; it returns the alert groups they raised.
	nightlyAt := func(i int) []*store.AlertGroup {
		t.Helper()
		buildstest.Register(t, e.st, fmt.Sprintf("auto-%d", i))
		if fired, err := sched.Tick(ctx); err != nil || fired != 1 {
			t.Fatalf("nightly %d: fired %d, %v", i, fired, err)
		}
		clock = clock.Add(24 * time.Hour)
		var queued int
		if err := e.st.Pool().QueryRow(ctx, `SELECT count(*) FROM runs WHERE state = 'queued' AND priority = 10`).Scan(&queued); err != nil || queued == 0 {
			t.Fatalf("nightly %d queued %d runs (%v)", i, queued, err)
		}
		var groups []*store.AlertGroup
		for range queued {
			// Claimed first even with a bisection's runs queued:
			// completeNextRun checks the priority is the schedule's.
			r := completeNextRun(t, e.st, "auto-host", 10, decode)
			gs, err := mon.ObserveRun(ctx, r)
			if err != nil {
				t.Fatal(err)
			}
			groups = append(groups, gs...)
		}
		return groups
	}
	var gid int64
	for i := 1; i <= 2*change && gid == 0; i++ {
		for _, g := range nightlyAt(i) {
			if g.Regression {
				gid = g.ID
			}
		}
	}
	if gid == 0 {
		t.Fatal("the nightly runs raised no regression")
	}
	// The loop starts the bisection by itself.
	var g AlertGroup
	testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		resp := e.api.Get(fmt.Sprintf("/v1/alerts/%d", gid))
		if err := json.Unmarshal(resp.Body.Bytes(), &g); err != nil || g.Bisection == nil || g.AutoBisect == "" {
			return errors.New("no automatic bisection recorded yet")
		}
		return nil
	})
	bs, err := e.st.GetBisection(ctx, g.Bisection.ID)
	if err != nil || bs.RequestedBy != "schedule nightly-auto (bisect: auto)" || g.AutoBisect != fmt.Sprintf("started bisection %d", bs.ID) {
		t.Fatalf("automatic bisection %+v (%v), outcome %q", bs, err, g.AutoBisect)
	}
	// Nightly work goes first: the next occurrence's run is claimed
	// before the bisection's queued runs (completeNextRun checks its
	// priority is the schedule's 10).
	nightlyAt(2*change + 1)
	// Complete every run the bisection queues until it decides; its steps
	// read the runs' results as they are ingested, so wait on its state
	// (bounded by time, not by a count of polls, which a loaded machine
	// can exhaust before a step has read its last result).
	var b Bisection
	testenv.Eventually(t, time.Minute, 10*time.Millisecond, func() error {
		for bisectRun(t, e.st, "auto-host", decode) != nil {
		}
		resp := e.api.Get(fmt.Sprintf("/v1/bisections/%d", bs.ID))
		if err := json.Unmarshal(resp.Body.Bytes(), &b); err != nil {
			t.Fatal(err)
		}
		if b.State == "running" {
			return errors.New("bisection still running")
		}
		return nil
	})
	if b.State != "culprit" || b.Culprit == nil || b.Culprit.FirstBad.ID != fmt.Sprintf("auto-%d", change) {
		t.Fatalf("automatic bisection ended %s (%s): %+v", b.State, b.Reason, b.Culprit)
	}
	// At most one per group: a later sweep starts nothing.
	if started, err := bis.AutoBisect(ctx); err != nil || started != 0 {
		t.Fatalf("second sweep started %d, %v", started, err)
	}
	var count int
	if err := e.st.Pool().QueryRow(ctx, `SELECT count(*) FROM bisections WHERE group_id = $1`, gid).Scan(&count); err != nil || count != 1 {
		t.Fatalf("%d bisections of group %d (%v), want 1", count, gid, err)
	}
	if out, tries, err := e.st.AutoBisectOutcome(ctx, gid); err != nil || tries != 1 || !strings.HasPrefix(out, "started bisection") {
		t.Fatalf("outcome %q after %d tries, %v", out, tries, err)
	}
}
