package api

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/builds/buildstest"
	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/internal/testenv"
	"github.com/lesfarm/lesfarm/jobs"
)

// withRunListener gives the API a started run listener and a safety poll
// of poll, so a prompt wake-up can only come from a notification.
func withRunListener(t testing.TB, poll time.Duration) envOpt {
	return func(d *Deps) {
		l := store.NewRunListener(d.Store, store.RunListenerConfig{Logger: slog.New(slog.DiscardHandler)})
		l.Start(context.Background())
		t.Cleanup(l.Stop)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := l.WaitListening(ctx); err != nil {
			t.Fatalf("run listener: %v", err)
		}
		d.RunListener, d.WaitPoll = l, poll
	}
}

// sseEvents follows an event stream and sends "<event> <data>" lines.
func sseEvents(t testing.TB, url string) <-chan string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("events: %s", resp.Status)
	}
	events := make(chan string, 100)
	go func() {
		defer close(events)
		sc := bufio.NewScanner(resp.Body)
		var ev string
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
				ev = v
			}
			if v, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				events <- ev + " " + v
			}
		}
	}()
	return events
}

// nextEvent returns the next event containing want, failing after d.
func nextEvent(t testing.TB, events <-chan string, want string, d time.Duration) string {
	t.Helper()
	timeout := time.After(d)
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatalf("stream ended before an event with %s", want)
			}
			if strings.Contains(ev, want) {
				return ev
			}
		case <-timeout:
			t.Fatalf("no event with %s within %s", want, d)
		}
	}
}

func TestTriggerWaitWakesOnNotification(t *testing.T) {
	t.Parallel()
	var listener *store.RunListener
	e := newEnv(t, withRunListener(t, 10*time.Second), func(d *Deps) { listener = d.RunListener })
	addDevice(t, e.st, "p1", "android", "Pixel 8", nil)
	buildstest.Register(t, e.st, "bw")
	type result struct {
		set RunSet
		at  time.Time
		err error
	}
	done := make(chan result, 1)
	go func() {
		req, _ := http.NewRequest("POST", e.srv.URL+"/v1/runs?wait=true&wait_timeout=60", strings.NewReader(`{"suite":"smoke","build":"bw"}`))
		req.Header.Set("Authorization", "Bearer "+e.token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		var r result
		if err == nil {
			err = json.NewDecoder(resp.Body).Decode(&r.set)
			resp.Body.Close()
		}
		r.at, r.err = time.Now(), err
		done <- r
	}()
	ctx := context.Background()
	var runID int64
	testenv.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		runs, err := e.st.ListRuns(ctx, &store.ListRunsParams{Build: "bw", Limit: 1})
		if err == nil && len(runs) != 1 {
			return fmt.Errorf("the waiting trigger created no run")
		}
		if err == nil {
			runID = runs[0].ID
		}
		return err
	})
	// The waiter subscribes to its runs before its first read: once it
	// follows the run, the change below reaches it as a notification.
	testenv.Eventually(t, 10*time.Second, 5*time.Millisecond, func() error {
		if n := listener.Subscribers(runID); n != 1 {
			return fmt.Errorf("%d waiters follow run %d, want 1", n, runID)
		}
		return nil
	})
	if _, err := e.st.CancelRun(ctx, runID, "test"); err != nil {
		t.Fatal(err)
	}
	committed := time.Now() // the notification is sent at commit
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatal(r.err)
		}
		lat := max(r.at.Sub(committed), 0)
		t.Logf("state change (commit) to wait return: %s", lat)
		if lat > 300*time.Millisecond {
			t.Fatalf("wait returned %s after the change (safety poll 10s): notification not used", lat)
		}
		if !r.set.Done || len(r.set.Runs) != 1 || r.set.Runs[0].State != store.RunCancelled {
			t.Fatalf("wait result %+v", r.set)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("wait did not return after the run was cancelled")
	}
}

func TestEventsWakeOnAnotherCoordinatorsChange(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t, withRunListener(t, 10*time.Second))
	// A second store on the same database stands for another coordinator.
	other, err := store.Open(ctx, e.st.Pool().Config().ConnString(), store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	spec, _ := jobs.Builtin("smoke")
	_, runs, err := other.CreateRuns(ctx, &store.CreateRunsParams{Spec: spec, Build: "b1"})
	if err != nil {
		t.Fatal(err)
	}
	id := runs[0].ID
	events := sseEvents(t, fmt.Sprintf("%s/v1/runs/events?run=%d", e.srv.URL, id))
	nextEvent(t, events, `"state":"queued"`, 5*time.Second)

	// Progress shows up promptly too. The stream subscribed before the
	// read that sent "queued", so no notification can slip past it.
	changed := time.Now()
	if _, err := other.Pool().Exec(ctx, `UPDATE runs SET progress = 0.5, progress_message = 'warming up' WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	nextEvent(t, events, `"progress_message":"warming up"`, 5*time.Second)
	if lat := time.Since(changed); lat > 300*time.Millisecond {
		t.Fatalf("progress event %s after the change (safety poll 10s)", lat)
	}
	changed = time.Now()
	if _, err := other.CancelRun(ctx, id, "elsewhere"); err != nil {
		t.Fatal(err)
	}
	nextEvent(t, events, `"state":"cancelled"`, 5*time.Second)
	lat := time.Since(changed)
	t.Logf("state change by another store to SSE event: %s", lat)
	if lat > 300*time.Millisecond {
		t.Fatalf("state event %s after the change (safety poll 10s)", lat)
	}
	if ev := nextEvent(t, events, "done ", 5*time.Second); !strings.Contains(ev, `"cancelled":1`) {
		t.Fatalf("done event %q", ev)
	}
}

func TestWaitSafetyPollCoversMissedNotifications(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t, withRunListener(t, 300*time.Millisecond))
	spec, _ := jobs.Builtin("smoke")
	_, runs, err := e.st.CreateRuns(ctx, &store.CreateRunsParams{Spec: spec, Build: "b1"})
	if err != nil {
		t.Fatal(err)
	}
	events := sseEvents(t, fmt.Sprintf("%s/v1/runs/events?run=%d", e.srv.URL, runs[0].ID))
	nextEvent(t, events, `"state":"queued"`, 5*time.Second)
	// A change that sends no notification (the trigger is disabled for
	// this one update) is still seen through the safety poll.
	tx, err := e.st.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	for _, q := range []string{
		`ALTER TABLE runs DISABLE TRIGGER runs_notify_update`,
		fmt.Sprintf(`UPDATE runs SET state = 'cancelled', finished_at = now() WHERE id = %d`, runs[0].ID),
		`ALTER TABLE runs ENABLE TRIGGER runs_notify_update`,
	} {
		if _, err := tx.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	nextEvent(t, events, `"state":"cancelled"`, 3*time.Second)
	nextEvent(t, events, "done ", 3*time.Second)
}

// BenchmarkRunWakeLatency measures how long after a run's state changes in
// Postgres a follower of its progress stream (GET /v1/runs/events) gets the
// event: with LISTEN/NOTIFY (safety poll 5s) and with the old 500ms poll
// alone. Run it with a fixed count, e.g. -benchtime=50x: each change waits
// a random part of the poll period first (not timed).
func BenchmarkRunWakeLatency(b *testing.B) {
	for _, mode := range []struct {
		name   string
		notify bool
	}{{"notify", true}, {"poll500ms", false}} {
		b.Run(mode.name, func(b *testing.B) {
			ctx := context.Background()
			st, err := store.Open(ctx, testenv.MigratedPostgresURL(b), store.Config{})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(st.Close)
			d := Deps{Store: st, Logger: slog.New(slog.DiscardHandler)}
			if mode.notify {
				withRunListener(b, 0)(&d)
			}
			h, _, err := New(d)
			if err != nil {
				b.Fatal(err)
			}
			srv := httptest.NewServer(h)
			b.Cleanup(srv.Close)
			spec, _ := jobs.Builtin("smoke")
			_, runs, err := st.CreateRuns(ctx, &store.CreateRunsParams{Spec: spec, Build: "bench"})
			if err != nil {
				b.Fatal(err)
			}
			id := runs[0].ID
			events := sseEvents(b, fmt.Sprintf("%s/v1/runs/events?run=%d", srv.URL, id))
			nextEvent(b, events, `"state":"queued"`, 5*time.Second)
			states := []string{"assigned", "running"}
			var lat []time.Duration
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				// Changes land at a random point of the poll period, as
				// real ones do (not in lockstep with the poll). No event
				// here: the random pause is the workload itself.
				b.StopTimer()
				time.Sleep(rand.N(500 * time.Millisecond))
				b.StartTimer()
				s := states[i%2]
				start := time.Now()
				if _, err := st.Pool().Exec(ctx, `UPDATE runs SET state = $2 WHERE id = $1`, id, s); err != nil {
					b.Fatal(err)
				}
				nextEvent(b, events, `"state":"`+s+`"`, 10*time.Second)
				lat = append(lat, time.Since(start))
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		})
	}
}
