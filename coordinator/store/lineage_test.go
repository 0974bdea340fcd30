package store_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pressly/goose/v3"

	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/internal/testenv"
	"github.com/lesfarm/lesfarm/migrations"
)

// TestRunLineage: a trigger's lineage reaches every run it creates and is
// read back by every run query (get, list filter, trigger, claim); no
// lineage means "main"; a bad one is refused before anything is written,
// and the database refuses it too.
func TestRunLineage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := open(t)
	addDevice(t, st, "dev-a", nil)
	addDevice(t, st, "dev-b", nil)

	tr, runs, err := st.CreateRuns(ctx, &store.CreateRunsParams{Spec: smoke(t), Build: "rc-1", Lineage: "release-1", Fanout: true})
	if err != nil {
		t.Fatal(err)
	}
	if tr.Lineage != "release-1" || len(runs) != 2 {
		t.Fatalf("trigger %+v with %d runs", tr, len(runs))
	}
	for _, r := range runs {
		if r.Lineage != "release-1" {
			t.Fatalf("created run %d lineage %q", r.ID, r.Lineage)
		}
	}
	if got, err := st.GetTrigger(ctx, tr.ID); err != nil || got.Lineage != "release-1" {
		t.Fatalf("GetTrigger: %+v %v", got, err)
	}
	if got, err := st.GetRun(ctx, runs[0].ID); err != nil || got.Lineage != "release-1" {
		t.Fatalf("GetRun: %+v %v", got, err)
	}
	_, mainRuns, err := st.CreateRuns(ctx, &store.CreateRunsParams{Spec: smoke(t), Build: "b1"})
	if err != nil {
		t.Fatal(err)
	}
	if mainRuns[0].Lineage != store.DefaultLineage {
		t.Fatalf("run without a lineage: %q, want %q", mainRuns[0].Lineage, store.DefaultLineage)
	}
	for _, tc := range []struct {
		lineage string
		want    int
	}{{"release-1", 2}, {"main", 1}, {"release-2", 0}, {"", 3}} {
		got, err := st.ListRuns(ctx, &store.ListRunsParams{Lineage: tc.lineage})
		if err != nil || len(got) != tc.want {
			t.Errorf("ListRuns(lineage=%q): %d runs, %v; want %d", tc.lineage, len(got), err, tc.want)
		}
	}
	// The claim returns the run through runCols too.
	g := claim(t, st, "dev-a")
	if g.Run.Lineage != "release-1" {
		t.Fatalf("claimed run lineage %q", g.Run.Lineage)
	}

	for _, bad := range []string{"release/1", "-x", ".hidden", "a b", "é", strings.Repeat("x", store.MaxLineageLen+1)} {
		if _, _, err := st.CreateRuns(ctx, &store.CreateRunsParams{Spec: smoke(t), Build: "b2", Lineage: bad}); !errors.Is(err, store.ErrBadLineage) {
			t.Errorf("lineage %q: err %v, want ErrBadLineage", bad, err)
		}
	}
	if n, _ := st.ListRuns(ctx, &store.ListRunsParams{Build: "b2"}); len(n) != 0 {
		t.Fatalf("refused lineages created %d runs", len(n))
	}
	if err := store.ValidateLineage(strings.Repeat("x", store.MaxLineageLen)); err != nil {
		t.Fatalf("longest lineage refused: %v", err)
	}
	// The database enforces the same rule for writers that bypass the store.
	for _, table := range []string{"runs", "triggers"} {
		_, err := st.Pool().Exec(ctx, `UPDATE `+table+` SET lineage = 'release/1' WHERE id = (SELECT min(id) FROM `+table+`)`)
		if err == nil || !strings.Contains(err.Error(), table+"_lineage_check") {
			t.Errorf("%s: bad lineage written: %v", table, err)
		}
	}
}

// TestScheduleLineage: schedules store their lineage (default "main") and
// refuse a bad one.
func TestScheduleLineage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := open(t)
	next := time.Now().Add(time.Hour)
	sc, err := st.CreateSchedule(ctx, &store.Schedule{Name: "n-main", Cron: "@daily", Timezone: "UTC", Suite: "smoke", Enabled: true, NextFireAt: next})
	if err != nil || sc.Lineage != store.DefaultLineage {
		t.Fatalf("schedule without lineage: %+v %v", sc, err)
	}
	rel, err := st.CreateSchedule(ctx, &store.Schedule{Name: "n-rel", Cron: "@daily", Timezone: "UTC", Suite: "smoke", Lineage: "release-1", Enabled: true, NextFireAt: next})
	if err != nil || rel.Lineage != "release-1" {
		t.Fatalf("release schedule: %+v %v", rel, err)
	}
	rel.Lineage = "release-2"
	if up, err := st.UpdateSchedule(ctx, rel); err != nil || up.Lineage != "release-2" {
		t.Fatalf("update: %+v %v", up, err)
	}
	if got, err := st.GetSchedule(ctx, rel.ID); err != nil || got.Lineage != "release-2" {
		t.Fatalf("get: %+v %v", got, err)
	}
	rel.Lineage = "release/2"
	if _, err := st.UpdateSchedule(ctx, rel); !errors.Is(err, store.ErrBadLineage) {
		t.Fatalf("update with a bad lineage: %v", err)
	}
	if _, err := st.CreateSchedule(ctx, &store.Schedule{Name: "n-bad", Cron: "@daily", Timezone: "UTC", Suite: "smoke", Lineage: "a b", NextFireAt: next}); !errors.Is(err, store.ErrBadLineage) {
		t.Fatalf("create with a bad lineage: %v", err)
	}
}

// TestLineageMigrationDownUp rolls migration 00021 back and forward on a
// database holding runs: down drops the lineage columns, up restores them
// with every existing row on "main".
func TestLineageMigrationDownUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testenv.MigratedPostgresURL(t)
	st, err := store.Open(ctx, dsn, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.CreateRuns(ctx, &store.CreateRunsParams{Spec: smoke(t), Build: "rc-1", Lineage: "release-1"}); err != nil {
		t.Fatal(err)
	}
	st.Close()

	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS())
	if err != nil {
		t.Fatal(err)
	}
	columns := func() int {
		t.Helper()
		var n int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM information_schema.columns
			WHERE column_name = 'lineage' AND table_name IN ('runs', 'triggers', 'schedules')`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := columns(); n != 3 {
		t.Fatalf("%d lineage columns after up, want 3", n)
	}
	if _, err := p.DownTo(ctx, 20); err != nil {
		t.Fatalf("down to 20: %v", err)
	}
	if n := columns(); n != 0 {
		t.Fatalf("%d lineage columns after down, want 0", n)
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatalf("up again: %v", err)
	}
	if n := columns(); n != 3 {
		t.Fatalf("%d lineage columns after up again, want 3", n)
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var lineages []string
	rows, _ := conn.Query(ctx, `SELECT lineage FROM runs UNION ALL SELECT lineage FROM triggers`)
	lineages, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(lineages) != 2 || lineages[0] != "main" || lineages[1] != "main" {
		t.Fatalf("lineages after down/up %v, %v: want the existing run and trigger on main", lineages, err)
	}
}

// TestConcurrentCreateRunsShareOneJob: triggers of one new spec created
// at once (two schedules of a suite, say main's and a release branch's
// nightlies, firing together) all succeed and share one job snapshot.
func TestConcurrentCreateRunsShareOneJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := open(t)
	const n = 8
	errs := make(chan error, n)
	start := make(chan struct{})
	for i := range n {
		go func() {
			<-start
			lineage := "main"
			if i%2 == 1 {
				lineage = "release-1"
			}
			_, _, err := st.CreateRuns(ctx, &store.CreateRunsParams{Spec: smoke(t), Build: "b1", Lineage: lineage})
			errs <- err
		}()
	}
	close(start)
	for range n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	var jobs, runs int
	st.Pool().QueryRow(ctx, `SELECT count(DISTINCT job_id), count(*) FROM runs`).Scan(&jobs, &runs)
	if jobs != 1 || runs != n {
		t.Fatalf("%d runs over %d jobs, want %d over 1", runs, jobs, n)
	}
}
