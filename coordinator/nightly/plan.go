package nightly

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// parser accepts standard 5-field cron expressions and descriptors such as
// @daily, @hourly and @every 10m.
var parser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// MaxCronLen bounds a cron expression's length.
const MaxCronLen = 200

// Expr is a parsed cron expression bound to a time zone. It is immutable and
// safe for concurrent use.
type Expr struct {
	sched cron.Schedule
	loc   *time.Location
}

// Parse parses a cron expression (5 fields: minute hour day-of-month month
// day-of-week, or a descriptor like @daily or "@every 6h") evaluated in the
// named IANA time zone ("" means UTC). It returns a one-line error for bad
// input; expressions that never fire (e.g. "0 0 30 2 *") are rejected.
func Parse(expr, tz string) (*Expr, error) {
	expr = strings.TrimSpace(expr)
	if expr == "" {
		return nil, errors.New("cron expression is empty")
	}
	if len(expr) > MaxCronLen {
		return nil, fmt.Errorf("cron expression longer than %d characters", MaxCronLen)
	}
	if strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ=") {
		return nil, errors.New("put the time zone in the timezone field, not in the cron expression")
	}
	loc := time.UTC
	if tz != "" {
		l, err := time.LoadLocation(tz)
		if err != nil {
			return nil, fmt.Errorf("unknown time zone %q", tz)
		}
		loc = l
	}
	s, err := parser.Parse(expr)
	if err != nil {
		return nil, fmt.Errorf("bad cron expression %q: %v", expr, err)
	}
	if d, ok := s.(cron.ConstantDelaySchedule); ok && d.Delay < time.Minute {
		return nil, fmt.Errorf("bad cron expression %q: @every needs at least 1m", expr)
	}
	e := &Expr{sched: s, loc: loc}
	if e.Next(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)).IsZero() {
		return nil, fmt.Errorf("cron expression %q never fires", expr)
	}
	return e, nil
}

// Next returns the first occurrence strictly after t (zero if none within
// five years, robfig/cron's search limit).
func (e *Expr) Next(t time.Time) time.Time {
	n := e.sched.Next(t.In(e.loc))
	if n.IsZero() {
		return n
	}
	return n.UTC()
}

// Decision is what to do with a schedule whose stored next occurrence is due.
type Decision struct {
	// Fire is the occurrence to fire now; zero when nothing fires.
	Fire time.Time
	// Skipped are the missed occurrences that will not fire, oldest first
	// (at most maxSkipRecorded of them; SkippedCount has the total).
	Skipped      []time.Time
	SkippedCount int
	// Next is the next occurrence after now, to store as next_fire_at.
	Next time.Time
}

// maxSkipRecorded bounds how many skipped occurrences are listed, so a long
// outage of an "@every 1m" schedule does not produce a huge plan.
const maxSkipRecorded = 100

// maxWalk bounds how many occurrences Plan enumerates after an outage.
const maxWalk = 100000

// Plan applies the missed-occurrence policy to a schedule whose stored next
// occurrence `due` is at or before now.
//
// Policy: of all occurrences in [due, now], only the most recent can fire,
// and only if it is at most `catchup` old at now; every other one is
// skipped. So a coordinator that was down overnight fires a missed nightly
// once on return if it is back within the catch-up window, and never
// replays a backlog of runs. A catchup of 0 fires only occurrences handled
// exactly on time (same instant), i.e. effectively "skip missed".
func (e *Expr) Plan(due, now time.Time, catchup time.Duration) Decision {
	var d Decision
	if due.After(now) {
		d.Next = due
		return d
	}
	// Occurrences before the catch-up window can only be skipped; count
	// them (bounded, so a long outage of a frequent schedule stays cheap).
	winStart := now.Add(-catchup)
	t := due
	var skipped []time.Time
	for n := 0; !t.IsZero() && t.Before(winStart); n++ {
		if n == maxWalk {
			// Too many to enumerate: jump to the window.
			t = e.Next(winStart.Add(-time.Nanosecond))
			break
		}
		d.SkippedCount++
		skipped = append(skipped, t)
		if len(skipped) > 2*maxSkipRecorded {
			skipped = append(skipped[:0], skipped[len(skipped)-maxSkipRecorded:]...)
		}
		t = e.Next(t)
	}
	// Occurrences inside [now-catchup, now]: the last one fires, the others
	// are skipped.
	for !t.IsZero() && !t.After(now) {
		if !d.Fire.IsZero() {
			d.SkippedCount++
			skipped = append(skipped, d.Fire)
		}
		d.Fire = t
		t = e.Next(t)
	}
	d.Next = t
	if len(skipped) > maxSkipRecorded {
		skipped = skipped[len(skipped)-maxSkipRecorded:]
	}
	d.Skipped = append([]time.Time(nil), skipped...)
	return d
}
