package nightly

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Run(m)) }

var quiet = slog.New(slog.DiscardHandler)

// clock is a shared fake clock.
type clock struct{ ns atomic.Int64 }

func (c *clock) Now() time.Time      { return time.Unix(0, c.ns.Load()).UTC() }
func (c *clock) Set(t time.Time)     { c.ns.Store(t.UnixNano()) }
func (c *clock) Add(d time.Duration) { c.ns.Add(int64(d)) }

// openStore returns a store on a fresh migrated database with a table that
// the test trigger writes to inside the firing transaction.
func openStore(t *testing.T) *store.Store {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, testenv.MigratedPostgresURL(t), store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	if _, err := st.Pool().Exec(ctx, `CREATE TABLE fired (id bigserial PRIMARY KEY, schedule_id bigint, occurrence timestamptz, build text, by_name text)`); err != nil {
		t.Fatal(err)
	}
	return st
}

// recordTrigger writes one row per fired occurrence in the claiming
// transaction, like run creation does.
func recordTrigger(name string) Trigger {
	return func(ctx context.Context, tx *store.Tx, occ *Occurrence) ([]string, error) {
		var id int64
		err := tx.Raw().QueryRow(ctx, `INSERT INTO fired (schedule_id, occurrence, build, by_name) VALUES ($1, $2, $3, $4) RETURNING id`,
			occ.Schedule.ID, occ.At, occ.Build, name).Scan(&id)
		return []string{fmt.Sprint(id)}, err
	}
}

func createSchedule(t *testing.T, st *store.Store, name, cron string, next time.Time, catchup int) *store.Schedule {
	t.Helper()
	sc, err := st.CreateSchedule(context.Background(), &store.Schedule{
		Name: name, Cron: cron, Timezone: "UTC", Suite: "smoke", Build: "nightly-{date}",
		Enabled: true, CatchupSeconds: catchup, NextFireAt: next,
	})
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

func TestTwoSchedulersNeverDoubleFire(t *testing.T) {
	st := openStore(t)
	ctx := context.Background()
	clk := &clock{}
	start := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	clk.Set(start)
	const nSched, steps = 8, 30
	for i := range nSched {
		createSchedule(t, st, fmt.Sprintf("s%d", i), "* * * * *", start, 3600)
	}
	var scheds []*Scheduler
	for _, name := range []string{"coord-a", "coord-b"} {
		s, err := New(Config{Store: st, Trigger: recordTrigger(name), Name: name, Now: clk.Now, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		scheds = append(scheds, s)
	}
	for step := 0; step < steps; step++ {
		var wg sync.WaitGroup
		// Both coordinators, two goroutines each, race for the same due rows.
		for _, s := range append(scheds, scheds...) {
			wg.Go(func() {
				if _, err := s.Tick(ctx); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		clk.Add(time.Minute)
	}
	var total, distinct, maxPer int
	err := st.Pool().QueryRow(ctx, `SELECT count(*), count(DISTINCT (schedule_id, occurrence)),
		COALESCE(max(c), 0) FROM fired, (SELECT count(*) c FROM fired GROUP BY schedule_id, occurrence) per`).Scan(&total, &distinct, &maxPer)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Pool().QueryRow(ctx, `SELECT count(*) FROM fired`).Scan(&total); err != nil {
		t.Fatal(err)
	}
	if total != nSched*steps || distinct != nSched*steps || maxPer != 1 {
		t.Fatalf("fired %d rows, %d distinct occurrences, max %d per occurrence; want %d, %d, 1", total, distinct, maxPer, nSched*steps, nSched*steps)
	}
	var byA, byB int
	st.Pool().QueryRow(ctx, `SELECT count(*) FILTER (WHERE by_name = 'coord-a'), count(*) FILTER (WHERE by_name = 'coord-b') FROM fired`).Scan(&byA, &byB)
	t.Logf("coord-a fired %d, coord-b fired %d", byA, byB)
	var firings int
	st.Pool().QueryRow(ctx, `SELECT count(*) FROM schedule_firings WHERE outcome = 'fired'`).Scan(&firings)
	if firings != total {
		t.Fatalf("%d firing records for %d runs", firings, total)
	}
}

func TestMissedOccurrencePolicy(t *testing.T) {
	st := openStore(t)
	ctx := context.Background()
	clk := &clock{}
	day := func(d, h, m int) time.Time { return time.Date(2026, 11, d, h, m, 0, 0, time.UTC) }
	// Down since before the 27th's 02:00; back on the 30th at 02:30.
	inWindow := createSchedule(t, st, "in-window", "0 2 * * *", day(27, 2, 0), 3600)
	// Same outage, but back at 05:00: even the latest is too old.
	pastWindow := createSchedule(t, st, "past-window", "0 2 * * *", day(27, 2, 0), 3600)
	reg := prometheus.NewRegistry()
	s, err := New(Config{Store: st, Trigger: recordTrigger("c"), Name: "c", Now: clk.Now, Logger: quiet, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if got := counter(s.occ.WithLabelValues("skipped")); got != 7 {
			t.Errorf("skipped counter = %v, want 7", got)
		}
		if got := counter(s.occ.WithLabelValues("fired")); got != 1 {
			t.Errorf("fired counter = %v, want 1", got)
		}
	}()
	clk.Set(day(30, 2, 30))
	// Only in-window is handled at 02:30 (pastWindow is handled too; its
	// latest occurrence is 30 minutes old, so disable it first).
	if _, err := st.Pool().Exec(ctx, `UPDATE schedules SET enabled = false WHERE id = $1`, pastWindow.ID); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Tick(ctx); err != nil || n != 1 {
		t.Fatalf("Tick = %d, %v", n, err)
	}
	clk.Set(day(30, 5, 0))
	st.Pool().Exec(ctx, `UPDATE schedules SET enabled = true WHERE id = $1`, pastWindow.ID)
	if n, err := s.Tick(ctx); err != nil || n != 1 {
		t.Fatalf("second Tick = %d, %v", n, err)
	}
	check := func(sc *store.Schedule, wantFired []time.Time, wantSkipped int, wantNext time.Time) {
		t.Helper()
		rows, err := st.ListScheduleFirings(ctx, sc.ID, 100)
		if err != nil {
			t.Fatal(err)
		}
		var fired []time.Time
		skipped := 0
		for _, f := range rows {
			switch f.Outcome {
			case store.FiringFired:
				fired = append(fired, f.Occurrence.UTC())
			case store.FiringSkipped:
				skipped++
			}
		}
		if fmt.Sprint(fired) != fmt.Sprint(wantFired) || skipped != wantSkipped {
			t.Errorf("%s: fired %v skipped %d; want %v and %d", sc.Name, fired, skipped, wantFired, wantSkipped)
		}
		got, _ := st.GetSchedule(ctx, sc.ID)
		if !got.NextFireAt.Equal(wantNext) {
			t.Errorf("%s: next_fire_at %v, want %v", sc.Name, got.NextFireAt, wantNext)
		}
	}
	check(inWindow, []time.Time{day(30, 2, 0)}, 3, time.Date(2026, 12, 1, 2, 0, 0, 0, time.UTC))
	check(pastWindow, nil, 4, time.Date(2026, 12, 1, 2, 0, 0, 0, time.UTC))
	var build string
	st.Pool().QueryRow(ctx, `SELECT build FROM fired WHERE schedule_id = $1`, inWindow.ID).Scan(&build)
	if build != "nightly-20261130" {
		t.Errorf("build = %q", build)
	}
	// Nothing is due now; a third tick does nothing.
	if n, err := s.Tick(ctx); err != nil || n != 0 {
		t.Fatalf("idle Tick = %d, %v", n, err)
	}
}

func TestFailingTriggerRecordsAndAdvances(t *testing.T) {
	st := openStore(t)
	ctx := context.Background()
	clk := &clock{}
	at := time.Date(2026, 11, 30, 2, 0, 0, 0, time.UTC)
	clk.Set(at.Add(time.Second))
	sc := createSchedule(t, st, "bad-suite", "0 2 * * *", at, 3600)
	s, _ := New(Config{Store: st, Name: "c", Now: clk.Now, Logger: quiet, Trigger: func(ctx context.Context, tx *store.Tx, occ *Occurrence) ([]string, error) {
		// A write that must be rolled back with the failure.
		if _, err := tx.Raw().Exec(ctx, `INSERT INTO fired (schedule_id) VALUES (1)`); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("unknown suite %q", occ.Schedule.Suite)
	}})
	if n, err := s.Tick(ctx); err != nil || n != 1 {
		t.Fatalf("Tick = %d, %v", n, err)
	}
	rows, _ := st.ListScheduleFirings(ctx, sc.ID, 10)
	if len(rows) != 1 || rows[0].Outcome != store.FiringFailed {
		t.Fatalf("firings = %+v", rows)
	}
	var n int
	st.Pool().QueryRow(ctx, `SELECT count(*) FROM fired`).Scan(&n)
	if n != 0 {
		t.Fatalf("failed trigger's writes survived: %d rows", n)
	}
	got, _ := st.GetSchedule(ctx, sc.ID)
	if !got.NextFireAt.After(at) {
		t.Fatalf("schedule not advanced: %v", got.NextFireAt)
	}
}

func TestStoreTriggerCreatesRealRunsOnce(t *testing.T) {
	st := openStore(t)
	ctx := context.Background()
	clk := &clock{}
	start := time.Date(2026, 11, 30, 2, 0, 0, 0, time.UTC)
	clk.Set(start)
	sc := createSchedule(t, st, "smoke-every-minute", "* * * * *", start, 600)
	// A schedule whose selector matches no device: each occurrence fails
	// (recorded), the schedule still advances.
	noDev, err := st.CreateSchedule(ctx, &store.Schedule{Name: "nobody", Cron: "* * * * *", Timezone: "UTC", Suite: "smoke",
		Build: "x", Enabled: true, CatchupSeconds: 600, NextFireAt: start, DeviceSelector: []byte(`{"device_model":"Nokia 3310"}`)})
	if err != nil {
		t.Fatal(err)
	}
	// A release branch's nightly: its runs carry its lineage, so they form
	// their own regression series.
	rel, err := st.CreateSchedule(ctx, &store.Schedule{Name: "release-nightly", Cron: "* * * * *", Timezone: "UTC", Suite: "smoke",
		Build: "rc-{date}", Lineage: "release-1", Enabled: true, CatchupSeconds: 600, NextFireAt: start})
	if err != nil {
		t.Fatal(err)
	}
	var scheds []*Scheduler
	for _, name := range []string{"a", "b"} {
		s, err := New(Config{Store: st, Trigger: StoreTrigger(st), Name: name, Now: clk.Now, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		scheds = append(scheds, s)
	}
	const steps = 5
	for range steps {
		var wg sync.WaitGroup
		for _, s := range scheds {
			wg.Go(func() {
				if _, err := s.Tick(ctx); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		clk.Add(time.Minute)
	}
	for _, s := range []struct {
		sc             *store.Schedule
		lineage, build string
	}{{sc, "main", "nightly-20261130"}, {rel, "release-1", "rc-20261130"}} {
		var runs, triggers int
		var desc string
		st.Pool().QueryRow(ctx, `SELECT count(*), string_agg(DISTINCT r.lineage || ' ' || r.build, ',') FROM runs r
			JOIN triggers t ON t.id = r.trigger_id WHERE t.source = $1`, fmt.Sprintf("schedule:%d", s.sc.ID)).Scan(&runs, &desc)
		st.Pool().QueryRow(ctx, `SELECT count(*) FROM triggers WHERE source = $1 AND lineage = $2`, fmt.Sprintf("schedule:%d", s.sc.ID), s.lineage).Scan(&triggers)
		if runs != steps || triggers != steps {
			fs, _ := st.ListScheduleFirings(ctx, s.sc.ID, 100)
			t.Logf("firings %+v", fs)
			t.Fatalf("%s: %d runs from %d triggers of lineage %s, want %d of each", s.sc.Name, runs, triggers, s.lineage, steps)
		}
		if desc != s.lineage+" "+s.build {
			t.Fatalf("%s: runs have lineage and build %q, want %q", s.sc.Name, desc, s.lineage+" "+s.build)
		}
	}
	var total int
	st.Pool().QueryRow(ctx, `SELECT count(*) FROM runs`).Scan(&total)
	if total != 2*steps {
		t.Fatalf("%d runs in all, want %d", total, 2*steps)
	}
	firings, _ := st.ListScheduleFirings(ctx, noDev.ID, 100)
	if len(firings) != steps || firings[0].Outcome != store.FiringFailed {
		t.Fatalf("no-device firings: %+v", firings)
	}
}

func counter(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return -1
	}
	return m.GetCounter().GetValue()
}

// TestScheduleBuildLatest: a schedule of build "latest" runs the newest
// build of its lineage at fire time (by position, not push time); while
// the lineage has none its occurrences fail with a detail that says so.
func TestScheduleBuildLatest(t *testing.T) {
	st := openStore(t)
	ctx := context.Background()
	clk := &clock{}
	start := time.Date(2026, 11, 30, 2, 0, 0, 0, time.UTC)
	clk.Set(start)
	sc, err := st.CreateSchedule(ctx, &store.Schedule{Name: "rel-latest", Cron: "* * * * *", Timezone: "UTC", Suite: "smoke",
		Build: store.BuildLatest, Lineage: "release-2", Enabled: true, CatchupSeconds: 600, NextFireAt: start})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Store: st, Trigger: StoreTrigger(st), Now: clk.Now, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	tick := func() store.ScheduleFiring {
		t.Helper()
		if n, err := s.Tick(ctx); err != nil || n != 1 {
			t.Fatalf("tick: %d, %v", n, err)
		}
		clk.Add(time.Minute)
		fs, err := st.ListScheduleFirings(ctx, sc.ID, 1)
		if err != nil || len(fs) != 1 {
			t.Fatalf("firings %v, %v", fs, err)
		}
		return fs[0]
	}
	if f := tick(); f.Outcome != store.FiringFailed || !strings.Contains(f.Detail, "build latest: lineage release-2 has no registered build yet") {
		t.Fatalf("firing without a build: %+v", f)
	}
	if _, err := st.PutArtifact(ctx, strings.Repeat("a", 64), 1, "exe"); err != nil {
		t.Fatal(err)
	}
	push := func(id, after string) {
		t.Helper()
		if _, _, err := st.CreateBuild(ctx, &store.CreateBuildParams{ID: id, Lineage: "release-2", After: after, GitSHA: "abcdef0",
			Executables: []store.Executable{{Platform: "linux/amd64", SHA256: strings.Repeat("a", 64), Size: 1}}}); err != nil {
			t.Fatal(err)
		}
	}
	push("rel-2.0", "")
	push("rel-2.1", "")
	push("rel-2.0.1", "rel-2.0") // pushed last, ordered before rel-2.1
	f := tick()
	if f.Outcome != store.FiringFired || len(f.RunIDs) != 1 {
		t.Fatalf("firing: %+v", f)
	}
	var build, sha string
	if err := st.Pool().QueryRow(ctx, `SELECT build, git_sha FROM runs WHERE id = $1::bigint`, f.RunIDs[0]).Scan(&build, &sha); err != nil {
		t.Fatal(err)
	}
	if build != "rel-2.1" || sha != "abcdef0" {
		t.Fatalf("latest resolved to build %s (git sha %s), want rel-2.1", build, sha)
	}
}
