package store_test

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
	"github.com/pressly/goose/v3"

	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/internal/testenv"
	"github.com/lesfarm/lesfarm/migrations"
)

func TestParseRunNotice(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    store.RunNotice
		wantErr string
	}{
		{"42 running 7", store.RunNotice{RunID: 42, State: "running", TriggerID: 7}, ""},
		{"42 queued 0", store.RunNotice{RunID: 42, State: "queued"}, ""},
		{"42", store.RunNotice{RunID: 42}, ""},
		{"", store.RunNotice{}, "want"},
		{"x running 1", store.RunNotice{}, "bad run id"},
		{"0 running 1", store.RunNotice{}, "bad run id"},
		{"-3 running 1", store.RunNotice{}, "bad run id"},
		{"4 running x", store.RunNotice{}, "bad trigger id"},
		{"4 running 1 extra", store.RunNotice{}, "want"},
		{"99999999999999999999 running", store.RunNotice{}, "bad run id"},
	}
	for _, tc := range tests {
		got, err := store.ParseRunNotice(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%q: err %v, want %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q: %+v %v, want %+v", tc.in, got, err, tc.want)
		}
	}
}

func FuzzParseRunNotice(f *testing.F) {
	for _, s := range []string{"1 queued 2", "3", "", "a b c d", "9223372036854775807 x 9223372036854775807", " 5\trunning  "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := store.ParseRunNotice(s)
		if err == nil && (n.RunID <= 0 || n.TriggerID < 0) {
			t.Fatalf("%q parsed to %+v", s, n)
		}
		if err != nil && len(err.Error()) > 200 {
			t.Fatalf("error too long: %v", err)
		}
	})
}

// startListener starts a run listener on st and waits until it listens.
func startListener(t *testing.T, st *store.Store) *store.RunListener {
	t.Helper()
	l := store.NewRunListener(st, store.RunListenerConfig{MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler)})
	l.Start(context.Background())
	t.Cleanup(l.Stop)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := l.WaitListening(ctx); err != nil {
		t.Fatalf("listener never listened: %v", err)
	}
	return l
}

// woken reports whether sub fires within d, and how long it took.
func woken(sub *store.RunSubscription, d time.Duration) (time.Duration, bool) {
	start := time.Now()
	select {
	case <-sub.C():
		return 0, true
	default:
	}
	select {
	case <-sub.C():
		return time.Since(start), true
	case <-time.After(d):
		return d, false
	}
}

// noticed records the run ids whose notices l has dispatched.
type noticed struct {
	mu  sync.Mutex
	ids map[int64]bool
}

func watchNotices(l *store.RunListener) *noticed {
	n := &noticed{ids: map[int64]bool{}}
	l.OnNotice(func(r store.RunNotice) {
		n.mu.Lock()
		n.ids[r.RunID] = true
		n.mu.Unlock()
	})
	return n
}

// wait waits until the notice of run id was dispatched. Postgres delivers
// notifications in commit order, so every earlier change has been
// dispatched too.
func (n *noticed) wait(t *testing.T, id int64) {
	t.Helper()
	testenv.Eventually(t, 5*time.Second, 5*time.Millisecond, func() error {
		n.mu.Lock()
		defer n.mu.Unlock()
		if !n.ids[id] {
			return fmt.Errorf("no notice of run %d yet", id)
		}
		return nil
	})
}

// drain empties sub's pending wake-up, if any.
func drain(sub *store.RunSubscription) {
	select {
	case <-sub.C():
	default:
	}
}

func TestRunListenerWakesOnlySubscribersOfTheChangedRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := open(t)
	l := startListener(t, st)
	notices := watchNotices(l)
	_, runs, err := st.CreateRuns(ctx, &store.CreateRunsParams{Spec: smoke(t)})
	if err != nil {
		t.Fatal(err)
	}
	_, other, err := st.CreateRuns(ctx, &store.CreateRunsParams{Spec: smoke(t)})
	if err != nil {
		t.Fatal(err)
	}
	mine := l.Subscribe([]int64{runs[0].ID})
	defer mine.Close()
	theirs := l.Subscribe([]int64{other[0].ID})
	defer theirs.Close()
	slow := l.Subscribe([]int64{runs[0].ID}) // never read until the end
	defer slow.Close()
	notices.wait(t, other[0].ID) // the inserts' notifications have passed
	drain(mine)
	drain(theirs)

	if _, err := st.CancelRun(ctx, runs[0].ID, "test"); err != nil {
		t.Fatal(err)
	}
	if d, ok := woken(mine, 5*time.Second); !ok {
		t.Fatal("subscriber of the cancelled run not woken")
	} else if d > 300*time.Millisecond {
		t.Errorf("wake-up took %s", d)
	}
	if _, ok := woken(theirs, 100*time.Millisecond); ok {
		t.Fatal("subscriber of another run woken")
	}
	// Progress of another run is seen by its subscriber, while slow still
	// holds a pending wake-up and stalls nobody.
	if _, err := st.Pool().Exec(ctx, `UPDATE runs SET progress_message = 'half way' WHERE id = $1`, other[0].ID); err != nil {
		t.Fatal(err)
	}
	if _, ok := woken(theirs, 5*time.Second); !ok {
		t.Fatal("progress change not notified")
	}
	// A lease renewal that changes nothing shown does not notify.
	if _, err := st.Pool().Exec(ctx, `UPDATE runs SET updated_at = now(), progress_message = progress_message WHERE id = $1`, other[0].ID); err != nil {
		t.Fatal(err)
	}
	if _, ok := woken(theirs, 150*time.Millisecond); ok {
		t.Fatal("an update changing nothing shown notified")
	}
	if _, ok := woken(slow, 0); !ok {
		t.Fatal("slow subscriber lost its (coalesced) wake-up")
	}
	if _, ok := woken(slow, 50*time.Millisecond); ok {
		t.Fatal("slow subscriber's wake-ups not coalesced into one")
	}
	// After Close, no more wake-ups (and Close twice is fine).
	mine.Close()
	mine.Close()
	if _, err := st.Pool().Exec(ctx, `UPDATE runs SET error = 'x' WHERE id = $1`, runs[0].ID); err != nil {
		t.Fatal(err)
	}
	if _, ok := woken(mine, 150*time.Millisecond); ok {
		t.Fatal("closed subscription woken")
	}
}

func TestRunListenerSeesOtherCoordinators(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testenv.MigratedPostgresURL(t)
	a, err := store.Open(ctx, url, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	b, err := store.Open(ctx, url, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	l := startListener(t, a)
	notices := watchNotices(l)
	_, runs, err := b.CreateRuns(ctx, &store.CreateRunsParams{Spec: smoke(t)})
	if err != nil {
		t.Fatal(err)
	}
	sub := l.Subscribe([]int64{runs[0].ID})
	defer sub.Close()
	notices.wait(t, runs[0].ID)
	drain(sub)
	if _, err := b.CancelRun(ctx, runs[0].ID, "other coordinator"); err != nil {
		t.Fatal(err)
	}
	if d, ok := woken(sub, 5*time.Second); !ok || d > 300*time.Millisecond {
		t.Fatalf("change by another store: woken=%v after %s", ok, d)
	}
}

func TestRunListenerReconnects(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := open(t)
	l := startListener(t, st)
	notices := watchNotices(l)
	_, runs, err := st.CreateRuns(ctx, &store.CreateRunsParams{Spec: smoke(t)})
	if err != nil {
		t.Fatal(err)
	}
	sub := l.Subscribe([]int64{runs[0].ID})
	defer sub.Close()
	notices.wait(t, runs[0].ID)
	drain(sub)

	pid := l.BackendPID()
	var killed bool
	if err := st.Pool().QueryRow(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid = $1 AND application_name = $2`,
		int32(pid), store.RunListenerAppName).Scan(&killed); err != nil || !killed {
		t.Fatalf("terminate listener backend %d: %v %v", pid, killed, err)
	}
	// The reconnect wakes every subscriber (notifications may have been
	// missed while down).
	if _, ok := woken(sub, 5*time.Second); !ok {
		t.Fatal("no wake-up on reconnect")
	}
	testenv.Eventually(t, 5*time.Second, 5*time.Millisecond, func() error {
		if p := l.BackendPID(); p == 0 || p == pid {
			return fmt.Errorf("listening on backend %d, want a new one (old %d)", p, pid)
		}
		return nil
	})
	if l.Connects() != 2 {
		t.Fatalf("connects %d, want 2", l.Connects())
	}
	drain(sub)
	if _, err := st.CancelRun(ctx, runs[0].ID, "after reconnect"); err != nil {
		t.Fatal(err)
	}
	if d, ok := woken(sub, 5*time.Second); !ok || d > 300*time.Millisecond {
		t.Fatalf("change after reconnect: woken=%v after %s", ok, d)
	}
}

func TestRunListenerStopsOnCancel(t *testing.T) {
	t.Parallel()
	st := open(t)
	l := store.NewRunListener(st, store.RunListenerConfig{Logger: slog.New(slog.DiscardHandler)})
	ctx, cancel := context.WithCancel(context.Background())
	l.Start(ctx)
	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer wcancel()
	if err := l.WaitListening(wctx); err != nil {
		t.Fatal(err)
	}
	pid := l.BackendPID()
	cancel()
	stopped := make(chan struct{})
	go func() { l.Stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("Stop hangs after the context was cancelled")
	}
	if l.BackendPID() != 0 {
		t.Fatal("still listening after stop")
	}
	// The backend is gone (closing is asynchronous on the server side).
	testenv.Eventually(t, 5*time.Second, 10*time.Millisecond, func() error {
		var n int
		if err := st.Pool().QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity WHERE pid = $1`, int32(pid)).Scan(&n); err != nil || n == 0 {
			return err
		}
		return fmt.Errorf("listener connection (backend %d) still open after stop", pid)
	})
	l.Stop() // twice is fine
	var nilL *store.RunListener
	sub := nilL.Subscribe([]int64{1})
	sub.Close()
	if sub.C() != nil {
		t.Fatal("nil listener's subscription must never fire")
	}
}

func TestRunNotifyMigrationUpDown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testenv.PostgresURL(t)
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// Step to exactly 23 and back, whatever later migrations exist.
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS())
	if err != nil {
		t.Fatal(err)
	}
	objects := func() string {
		t.Helper()
		var triggers, funcs int
		if err := db.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM pg_trigger WHERE tgname IN ('runs_notify_insert', 'runs_notify_update')),
			(SELECT count(*) FROM pg_proc WHERE proname = 'lesfarm_notify_run')`).Scan(&triggers, &funcs); err != nil {
			t.Fatal(err)
		}
		return strings.Repeat("t", triggers) + strings.Repeat("f", funcs)
	}
	if _, err := p.UpTo(ctx, 22); err != nil {
		t.Fatal(err)
	}
	if got := objects(); got != "" {
		t.Fatalf("before 23: %q", got)
	}
	if _, err := p.UpTo(ctx, 23); err != nil {
		t.Fatal(err)
	}
	if got := objects(); got != "ttf" {
		t.Fatalf("after up: %q, want both triggers and the function", got)
	}
	if _, err := p.DownTo(ctx, 22); err != nil {
		t.Fatalf("down: %v", err)
	}
	if got := objects(); got != "" {
		t.Fatalf("after down: %q left behind", got)
	}
	if _, err := p.UpTo(ctx, 23); err != nil {
		t.Fatalf("up again: %v", err)
	}
	if got := objects(); got != "ttf" {
		t.Fatalf("after up again: %q", got)
	}
}
