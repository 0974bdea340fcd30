package nightly

import (
	"strings"
	"testing"
	"time"
)

func ts(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

func TestParse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		expr, tz string
		wantErr  string
	}{
		{"0 2 * * *", "", ""},
		{"@daily", "Europe/Paris", ""},
		{"@every 6h", "", ""},
		{"", "", "empty"},
		{"0 2 * *", "", "bad cron"},
		{"0 25 * * *", "", "bad cron"},
		{"0 0 30 2 *", "", "never fires"},
		{"@every 5s", "", "at least 1m"},
		{"0 2 * * *", "Mars/Olympus", "unknown time zone"},
		{"CRON_TZ=UTC 0 2 * * *", "", "timezone field"},
	}
	for _, tc := range tests {
		_, err := Parse(tc.expr, tc.tz)
		if tc.wantErr == "" && err != nil {
			t.Errorf("Parse(%q, %q) = %v", tc.expr, tc.tz, err)
		}
		if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("Parse(%q, %q) error = %v, want containing %q", tc.expr, tc.tz, err, tc.wantErr)
		}
	}
}

func TestNextTimeZone(t *testing.T) {
	t.Parallel()
	e, err := Parse("0 2 * * *", "Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	// 02:00 in Paris in winter is 01:00 UTC.
	got := e.Next(ts("2026-11-30T00:00:00Z"))
	if want := ts("2026-11-30T01:00:00Z"); !got.Equal(want) {
		t.Fatalf("Next = %v, want %v", got, want)
	}
}

func TestPlan(t *testing.T) {
	t.Parallel()
	daily, _ := Parse("0 2 * * *", "")
	tests := []struct {
		name     string
		due, now string
		catchup  time.Duration
		fire     string
		skipped  int
		next     string
	}{
		{"not due", "2026-11-30T02:00:00Z", "2026-11-30T01:59:00Z", time.Hour, "", 0, "2026-11-30T02:00:00Z"},
		{"on time", "2026-11-30T02:00:00Z", "2026-11-30T02:00:01Z", time.Hour, "2026-11-30T02:00:00Z", 0, "2026-12-01T02:00:00Z"},
		{"late within window", "2026-11-30T02:00:00Z", "2026-11-30T02:59:00Z", time.Hour, "2026-11-30T02:00:00Z", 0, "2026-12-01T02:00:00Z"},
		{"late past window", "2026-11-30T02:00:00Z", "2026-11-30T03:01:00Z", time.Hour, "", 1, "2026-12-01T02:00:00Z"},
		{"three days down, back in window", "2026-11-27T02:00:00Z", "2026-11-30T02:30:00Z", time.Hour, "2026-11-30T02:00:00Z", 3, "2026-12-01T02:00:00Z"},
		{"three days down, past window", "2026-11-27T02:00:00Z", "2026-11-30T05:00:00Z", time.Hour, "", 4, "2026-12-01T02:00:00Z"},
		{"zero catchup exact", "2026-11-30T02:00:00Z", "2026-11-30T02:00:00Z", 0, "2026-11-30T02:00:00Z", 0, "2026-12-01T02:00:00Z"},
		{"zero catchup late", "2026-11-30T02:00:00Z", "2026-11-30T02:00:01Z", 0, "", 1, "2026-12-01T02:00:00Z"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := daily.Plan(ts(tc.due), ts(tc.now), tc.catchup)
			if tc.fire == "" && !d.Fire.IsZero() || tc.fire != "" && !d.Fire.Equal(ts(tc.fire)) {
				t.Errorf("Fire = %v, want %q", d.Fire, tc.fire)
			}
			if d.SkippedCount != tc.skipped || len(d.Skipped) != tc.skipped {
				t.Errorf("skipped = %d (%v), want %d", d.SkippedCount, d.Skipped, tc.skipped)
			}
			if !d.Next.Equal(ts(tc.next)) {
				t.Errorf("Next = %v, want %v", d.Next, tc.next)
			}
		})
	}
}

func TestPlanLongOutageBounded(t *testing.T) {
	t.Parallel()
	e, _ := Parse("@every 1m", "")
	d := e.Plan(ts("2026-01-01T00:00:00Z"), ts("2026-11-30T00:00:30Z"), time.Minute)
	if d.Fire.IsZero() || !d.Next.After(ts("2026-11-30T00:00:30Z")) {
		t.Fatalf("decision = fire %v next %v", d.Fire, d.Next)
	}
	if len(d.Skipped) > maxSkipRecorded || d.SkippedCount < maxSkipRecorded {
		t.Fatalf("skipped %d listed of %d", len(d.Skipped), d.SkippedCount)
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"0 2 * * *", "@daily", "@every 1h", "*/5 * * * 1-5", "0 0 30 2 *", "@every -1s"} {
		f.Add(s, "UTC")
	}
	f.Fuzz(func(t *testing.T, expr, tz string) {
		e, err := Parse(expr, tz)
		if err != nil {
			return
		}
		base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		n := e.Next(base)
		if !n.After(base) {
			t.Fatalf("Next(%v) = %v for %q", base, n, expr)
		}
		d := e.Plan(n, n.Add(time.Hour), time.Hour)
		if !d.Next.After(n.Add(time.Hour)) {
			t.Fatalf("Plan next %v not after now", d.Next)
		}
	})
}
