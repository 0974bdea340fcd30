// Package nightly fires cron schedules stored in Postgres (table schedules):
// each occurrence of a schedule triggers its suite's runs, exactly once
// across any number of coordinators sharing the database.
//
// # Exactly once
//
// Every coordinator runs a Scheduler. On each tick it asks the store for a
// due schedule (next_fire_at <= now) with SELECT … FOR UPDATE SKIP LOCKED,
// so two coordinators never hold the same schedule. Inside that one
// transaction the Scheduler creates the occurrence's runs (Trigger), records
// the occurrence in schedule_firings (primary key (schedule, occurrence))
// and advances next_fire_at with a compare-and-set on its old value; then it
// commits. Either all of that happens or none of it, so an occurrence's runs
// exist exactly when its firing record does, and a coordinator that dies
// mid-way leaves the occurrence for the next one. No leader election is
// needed; the row lock is the lease, and it dies with the transaction.
//
// # Missed occurrences
//
// When no coordinator ran at an occurrence's time (downtime), the policy is
// "fire the latest, once, within the catch-up window": of all occurrences
// that passed, only the most recent fires, and only if it is at most
// catchup_seconds old (default 3600); all others are recorded as skipped.
// A nightly suite missed during a 3-day outage therefore runs once when the
// farm is back within an hour of its time, and never replays a backlog.
// Editing a schedule recomputes next_fire_at from the edit time, so edits
// never fire a backlog either.
package nightly

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lesfarm/lesfarm/coordinator/startstop"
	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/jobs"
)

// Occurrence is one due occurrence of a schedule handed to a Trigger.
type Occurrence struct {
	Schedule *store.Schedule
	At       time.Time
	// Build is Schedule.Build with "{date}" replaced by At's UTC date.
	// "latest" (store.BuildLatest) is kept as it is: StoreTrigger resolves
	// it when the occurrence fires.
	Build string
}

// Trigger creates the runs of one occurrence inside tx and returns their
// ids. It must use tx for every write, so the runs commit or roll back with
// the firing record. An error marks the occurrence failed (the runs are
// rolled back to a savepoint) without stopping the schedule.
type Trigger func(ctx context.Context, tx *store.Tx, occ *Occurrence) ([]string, error)

// Config configures a Scheduler.
type Config struct {
	Store   *store.Store
	Trigger Trigger
	// Name identifies this coordinator in firing records (default
	// hostname:pid).
	Name string
	// Interval between polls (default 15s). Occurrences fire up to one
	// interval late.
	Interval time.Duration
	// Now is the clock (default time.Now); tests inject one.
	Now    func() time.Time
	Logger *slog.Logger
	// Registerer, when set, receives lesfarm_schedule_occurrences_total
	// {outcome="fired|skipped|failed"}.
	Registerer prometheus.Registerer
}

// Scheduler polls Postgres and fires due schedules. Start it once; Stop
// waits for the loop to exit. It is safe for concurrent use.
type Scheduler struct {
	cfg Config
	log *slog.Logger
	occ *prometheus.CounterVec
	ss  startstop.Service
}

// New validates cfg and returns a Scheduler.
func New(cfg Config) (*Scheduler, error) {
	if cfg.Store == nil {
		return nil, errors.New("nightly config: Store is required")
	}
	if cfg.Trigger == nil {
		return nil, errors.New("nightly config: Trigger is required")
	}
	if cfg.Name == "" {
		host, _ := os.Hostname()
		cfg.Name = fmt.Sprintf("%s:%d", host, os.Getpid())
	}
	cfg.Interval = cmp.Or(cfg.Interval, 15*time.Second)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	log := cmp.Or(cfg.Logger, slog.Default())
	s := &Scheduler{cfg: cfg, log: log}
	if cfg.Registerer != nil {
		s.occ = prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lesfarm_schedule_occurrences_total",
			Help: "Schedule occurrences handled by this coordinator, by outcome (fired, skipped by the missed-occurrence policy, failed).",
		}, []string{"outcome"})
		if err := cfg.Registerer.Register(s.occ); err != nil {
			return nil, fmt.Errorf("nightly config: %w", err)
		}
	}
	return s, nil
}

// Start runs the poll loop until ctx is cancelled or Stop is called; see
// coordinator/startstop for the semantics shared by every background
// service. It returns at once, and never an error.
func (s *Scheduler) Start(ctx context.Context) error {
	return s.ss.StartFunc(ctx, nil, func(ctx context.Context) {
		t := time.NewTicker(s.cfg.Interval)
		defer t.Stop()
		for {
			if _, err := s.Tick(ctx); err != nil && ctx.Err() == nil {
				s.log.ErrorContext(ctx, "nightly: tick failed", "err", err)
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	})
}

// Started is closed once the poll loop runs.
func (s *Scheduler) Started() <-chan struct{} { return s.ss.Started() }

// Stop ends the loop and waits for it; it is idempotent.
func (s *Scheduler) Stop() { s.ss.Stop() }

// maxPerTick bounds how many schedules one tick handles.
const maxPerTick = 1000

// Tick handles every schedule due at the clock's now and returns how many
// it handled (fired, skipped or failed).
func (s *Scheduler) Tick(ctx context.Context) (int, error) {
	n := 0
	for n < maxPerTick {
		now := s.cfg.Now()
		var out *store.ScheduleOutcome
		ok, err := s.cfg.Store.HandleDueSchedule(ctx, now, s.cfg.Name, func(ctx context.Context, tx *store.Tx, sc *store.Schedule) (*store.ScheduleOutcome, error) {
			var err error
			out, err = s.handle(ctx, tx, sc, now)
			return out, err
		})
		if err != nil {
			return n, err
		}
		if ok && s.occ != nil {
			for _, f := range out.Firings {
				s.occ.WithLabelValues(f.Outcome).Inc()
			}
		}
		if !ok {
			return n, nil
		}
		n++
	}
	return n, nil
}

// handle applies the missed-occurrence policy to one locked schedule and
// fires the chosen occurrence.
func (s *Scheduler) handle(ctx context.Context, tx *store.Tx, sc *store.Schedule, now time.Time) (*store.ScheduleOutcome, error) {
	expr, err := Parse(sc.Cron, sc.Timezone)
	if err != nil {
		// A schedule stored before a validation rule existed: disable it by
		// pushing it far out, and record why.
		s.log.ErrorContext(ctx, "nightly: bad schedule", "schedule_id", sc.ID, "err", err)
		return &store.ScheduleOutcome{
			Firings: []store.ScheduleFiring{{Occurrence: sc.NextFireAt, Outcome: store.FiringFailed, Detail: err.Error()}},
			Next:    now.AddDate(100, 0, 0),
		}, nil
	}
	d := expr.Plan(sc.NextFireAt, now, time.Duration(sc.CatchupSeconds)*time.Second)
	out := &store.ScheduleOutcome{Next: d.Next}
	if out.Next.IsZero() {
		out.Next = now.AddDate(100, 0, 0) // never fires again
	}
	for i, t := range d.Skipped {
		detail := "missed: older than the catch-up window"
		if i == 0 && d.SkippedCount > len(d.Skipped) {
			detail = fmt.Sprintf("missed: older than the catch-up window (%d earlier occurrences also skipped)", d.SkippedCount-len(d.Skipped))
		}
		out.Firings = append(out.Firings, store.ScheduleFiring{Occurrence: t, Outcome: store.FiringSkipped, Detail: detail})
	}
	if len(d.Skipped) > 0 {
		s.log.WarnContext(ctx, "nightly: skipped missed occurrences", "schedule_id", sc.ID, "schedule", sc.Name, "count", d.SkippedCount)
	}
	if d.Fire.IsZero() {
		return out, nil
	}
	occ := &Occurrence{Schedule: sc, At: d.Fire, Build: strings.ReplaceAll(sc.Build, "{date}", d.Fire.UTC().Format("20060102"))}
	// A savepoint keeps a failing trigger from aborting the claim.
	var ids []string
	terr, err := tx.Savepoint(ctx, func(sp *store.Tx) error {
		var err error
		ids, err = s.cfg.Trigger(ctx, sp, occ)
		return err
	})
	if err != nil {
		return nil, err
	}
	if terr != nil {
		s.log.ErrorContext(ctx, "nightly: trigger failed", "schedule_id", sc.ID, "schedule", sc.Name, "occurrence", d.Fire, "err", terr)
		out.Firings = append(out.Firings, store.ScheduleFiring{Occurrence: d.Fire, Outcome: store.FiringFailed, Detail: terr.Error()})
		return out, nil
	}
	s.log.InfoContext(ctx, "nightly: fired", "schedule_id", sc.ID, "schedule", sc.Name, "occurrence", d.Fire, "runs", len(ids))
	out.Firings = append(out.Firings, store.ScheduleFiring{Occurrence: d.Fire, Outcome: store.FiringFired, RunIDs: ids})
	out.Fired = d.Fire
	return out, nil
}

// StoreTrigger returns the production Trigger: it resolves the schedule's
// suite (stored, else built-in), applies the schedule's device selector and
// config override, and creates the runs with store.Tx.CreateRuns inside the
// claiming transaction (source "schedule:<id>", the schedule's build
// lineage, so a release branch's nightly feeds its own regression series).
// When the schedule has a
// selector, runs fan out to every matching online device.
//
// A schedule whose build is "latest" (store.BuildLatest) runs the newest
// registered build of its lineage at fire time; while the lineage has no
// build the occurrence fails with a detail that says so.
func StoreTrigger(st *store.Store) Trigger {
	return func(ctx context.Context, tx *store.Tx, occ *Occurrence) ([]string, error) {
		sc := occ.Schedule
		build, gitSHA := occ.Build, sc.GitSHA
		if build == store.BuildLatest {
			b, err := st.LatestBuild(ctx, sc.Lineage)
			if errors.Is(err, store.ErrNotFound) {
				return nil, fmt.Errorf("build latest: lineage %s has no registered build yet (push one with lesfarm build push ID FILE... --lineage %s)",
					cmp.Or(sc.Lineage, store.DefaultLineage), cmp.Or(sc.Lineage, store.DefaultLineage))
			}
			if err != nil {
				return nil, fmt.Errorf("build latest: %w", err)
			}
			build, gitSHA = b.ID, b.GitSHA
		}
		base, err := st.ResolveSuite(ctx, sc.Suite)
		if errors.Is(err, store.ErrNotFound) {
			return nil, fmt.Errorf("unknown suite %q", sc.Suite)
		}
		if err != nil {
			return nil, err
		}
		var ov *jobs.Override
		if len(sc.ConfigOverride) > 0 {
			ov = new(jobs.Override)
			if err := json.Unmarshal(sc.ConfigOverride, ov); err != nil {
				return nil, fmt.Errorf("schedule override: %w", err)
			}
		}
		spec, err := base.Apply(ov)
		if err != nil {
			return nil, err
		}
		p := &store.CreateRunsParams{Spec: spec, Build: build, GitSHA: gitSHA, Lineage: sc.Lineage, Source: fmt.Sprintf("schedule:%d", sc.ID)}
		if s := strings.TrimSpace(string(sc.DeviceSelector)); s != "" && s != "{}" && s != "null" {
			var sel jobs.Selector
			if err := json.Unmarshal(sc.DeviceSelector, &sel); err != nil {
				return nil, fmt.Errorf("schedule selector: %w", err)
			}
			p.Selector, p.Fanout = &sel, true
		}
		if sc.Priority != 0 {
			spec.Priority = sc.Priority
		}
		tr, _, err := tx.CreateRuns(ctx, p)
		if err != nil {
			return nil, err
		}
		ids := make([]string, len(tr.RunIDs))
		for i, id := range tr.RunIDs {
			ids[i] = strconv.FormatInt(id, 10)
		}
		return ids, nil
	}
}
