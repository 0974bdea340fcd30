package bisect

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/abtest"
	"github.com/lesfarm/lesfarm/coordinator/startstop"
	"github.com/lesfarm/lesfarm/coordinator/store"
)

// Priority is the priority of a bisection's runs: below nightly work
// (schedules default to 0), so a bisection only uses devices the farm's
// regular work leaves idle.
const Priority = -100

// DefaultPoll is how often a Bisector advances the running bisections.
const DefaultPoll = 2 * time.Second

// maxAborts bounds the steps a bisection may abort (device lost, runs
// failing) before it fails.
const maxAborts = 6

// Canceller pushes a run's cancellation to its agent (the coordinator
// implements it).
type Canceller interface {
	CancelRun(ctx context.Context, runID int64) error
}

// Config configures a Bisector. Store is required.
type Config struct {
	Store *store.Store
	// Canceller notifies agents of runs the bisection cancels (an
	// aborted step's); nil: the store alone (agents learn at their next
	// heartbeat).
	Canceller Canceller
	Logger    *slog.Logger
	// Poll is the period of the background loop (default DefaultPoll).
	Poll time.Duration
	// Plan is each step's rounds (zero: abtest's defaults).
	Plan abtest.Plan
	// Budget is a bisection's device time when the request names none
	// (default DefaultBudget).
	Budget time.Duration
	// AutoPoll is how often the loop looks for alert groups due an
	// automatic bisection (schedules with bisect "auto"; default
	// DefaultAutoPoll); AutoMaxAge bounds the age of the groups it
	// considers (default DefaultAutoMaxAge); AutoRetry is when a group
	// refused for want of an online device is tried again (default
	// DefaultAutoRetry).
	AutoPoll, AutoMaxAge, AutoRetry time.Duration
}

// Bisector creates bisections and advances them: Create checks a request
// and starts one; Advance moves one on (any number of callers, on any
// coordinator: a bisection is advanced under its advisory lock); Start
// runs a loop that advances every running bisection every Poll. It keeps
// no state of its own and is safe for concurrent use.
type Bisector struct {
	cfg  Config
	log  *slog.Logger
	wake chan struct{}
	ss   startstop.Service
}

// New validates cfg and returns a Bisector. cfg must not be reused.
func New(cfg Config) (*Bisector, error) {
	if cfg.Store == nil {
		return nil, errors.New("bisect: Store is required")
	}
	cfg.Poll = cmp.Or(cfg.Poll, DefaultPoll)
	cfg.Plan = cfg.Plan.WithDefaults()
	cfg.Budget = cmp.Or(cfg.Budget, DefaultBudget)
	cfg.AutoPoll = cmp.Or(cfg.AutoPoll, DefaultAutoPoll)
	cfg.AutoMaxAge = cmp.Or(cfg.AutoMaxAge, DefaultAutoMaxAge)
	cfg.AutoRetry = cmp.Or(cfg.AutoRetry, DefaultAutoRetry)
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Bisector{cfg: cfg, log: log, wake: make(chan struct{}, 1)}, nil
}

// Start runs the loop that advances running bisections, and starts the
// automatic ones (AutoBisect) every AutoPoll, until Stop.
func (b *Bisector) Start(ctx context.Context) error {
	return b.ss.StartFunc(ctx, nil, b.loop)
}

// Stop stops the loop and waits for it.
func (b *Bisector) Stop() { b.ss.Stop() }

// Wake makes the loop advance the running bisections now (a run ended).
func (b *Bisector) Wake() {
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

func (b *Bisector) loop(ctx context.Context) {
	t := time.NewTicker(b.cfg.Poll)
	defer t.Stop()
	auto := time.NewTicker(b.cfg.AutoPoll)
	defer auto.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-b.wake:
		case <-auto.C:
			if _, err := b.AutoBisect(ctx); err != nil && ctx.Err() == nil {
				b.log.WarnContext(ctx, "bisect: automatic bisections", "err", err)
			}
		}
		ids, err := b.cfg.Store.RunningBisections(ctx)
		if err != nil {
			if ctx.Err() == nil {
				b.log.WarnContext(ctx, "bisect: list running", "err", err)
			}
			continue
		}
		for _, id := range ids {
			if _, err := b.Advance(ctx, id); err != nil && ctx.Err() == nil {
				b.log.WarnContext(ctx, "bisect: advance", "bisection_id", id, "err", err)
			}
		}
	}
}

// Advance moves bisection id on (see advance) and returns it as stored.
// When another caller is advancing it, it returns it as it is.
func (b *Bisector) Advance(ctx context.Context, id int64) (*store.Bisection, error) {
	if _, err := b.cfg.Store.WithBisectionLock(ctx, id, func() error { return b.advance(ctx, id) }); err != nil {
		return nil, err
	}
	return b.cfg.Store.GetBisection(ctx, id)
}

// advance drives the running step (see step): on its end, the search
// names the next pair and a step for it is started on the bisection's
// device (another of the model when that one is gone), unless the budget
// cannot pay for its first rounds. It stores the search state, the device
// time and, when the search ended, its end.
func (b *Bisector) advance(ctx context.Context, id int64) error {
	st := b.cfg.Store
	bs, err := st.GetBisection(ctx, id)
	if err != nil || bs.State != store.BisectionRunning {
		return err
	}
	var s Search
	if err := json.Unmarshal(bs.Search, &s); err != nil {
		return fmt.Errorf("bisect: bisection %d: search state: %w", id, err)
	}
	steps, err := st.BisectionSteps(ctx, id)
	if err != nil {
		return err
	}
	var cur *store.BisectionStep
	aborted := 0
	for i := range steps {
		switch steps[i].State {
		case store.StepRunning:
			cur = &steps[i]
		case store.StepAborted:
			aborted++
		}
	}
	spent, runs, err := st.BisectionDeviceTime(ctx, id)
	if err != nil {
		return err
	}
	a := &advancer{b: b, bs: bs, s: &s, spent: spent, runs: runs, aborted: aborted}
	if cur != nil {
		if err := a.step(ctx, cur); err != nil {
			return err
		}
	}
	if a.waiting == "" && s.State == StateRunning && (cur == nil || a.stepEnded) {
		if err := a.next(ctx); err != nil {
			return err
		}
	}
	if a.spent, a.runs, err = st.BisectionDeviceTime(ctx, id); err != nil {
		return err
	}
	return a.save(ctx)
}

// advancer is one advance of one bisection.
type advancer struct {
	b       *Bisector
	bs      *store.Bisection
	s       *Search
	spent   time.Duration
	runs    int
	aborted int
	// stepEnded: the running step was finished or aborted now.
	stepEnded bool
	// waiting says what the bisection waits for, when not for runs.
	waiting string
}

func (a *advancer) save(ctx context.Context) error {
	raw, err := json.Marshal(a.s)
	if err != nil {
		return err
	}
	p := &store.UpdateBisectionParams{ID: a.bs.ID, Search: raw, State: a.s.State, Reason: cmp.Or(a.s.Reason, a.waiting),
		DeviceID: a.bs.DeviceID, DeviceTime: a.spent, Runs: a.runs}
	if a.s.State == StateCulprit {
		lg, fb := a.s.LastGood(), a.s.FirstBad()
		p.LastGoodBuild, p.LastGoodSHA, p.FirstBadBuild, p.FirstBadSHA = lg.ID, lg.GitSHA, fb.ID, fb.GitSHA
	}
	err = a.b.cfg.Store.UpdateBisection(ctx, p)
	if errors.Is(err, store.ErrConflict) {
		return nil // cancelled meanwhile
	}
	if err == nil && a.s.State != StateRunning {
		a.b.log.InfoContext(ctx, "bisect: ended", "bisection_id", a.bs.ID, "state", a.s.State, "reason", a.s.Reason,
			"steps", a.s.Steps, "device_time", a.spent.Round(time.Second))
	}
	return err
}

// next starts the step for the pair the search names next, leaving out
// builds deleted since the bisection started.
func (a *advancer) next(ctx context.Context) error {
	p, ok := a.s.Next()
	for ok {
		gone := -1
		for _, i := range []int{p.A, p.B} {
			if _, err := a.b.cfg.Store.GetBuild(ctx, a.s.Builds[i].ID); errors.Is(err, store.ErrNotFound) {
				gone = i
			} else if err != nil {
				return err
			}
		}
		if gone < 0 {
			break
		}
		a.s.Skip(gone, "deleted mid-bisection")
		p, ok = a.s.Next()
	}
	if !ok {
		return nil
	}
	if !a.s.Affords(2*a.s.Plan.Initial, a.spent, a.runs) {
		a.s.Exhausted(a.spent)
		return nil
	}
	build, other := a.s.Builds[p.A], a.s.Builds[p.B]
	dev, err := a.device(ctx, p, "")
	if err != nil || dev == "" {
		return err
	}
	note := ""
	if a.bs.DeviceID != "" && dev != a.bs.DeviceID {
		note = fmt.Sprintf("on %s: %s cannot run it now", dev, a.bs.DeviceID)
	}
	step, runs, err := a.b.cfg.Store.StartBisectionStep(ctx, &store.StartBisectionStepParams{Bisection: a.bs, Kind: p.Kind,
		AIndex: p.A, BIndex: p.B, BuildA: build.ID, BuildB: other.ID, DeviceID: dev, MinEffect: a.s.Options(p).MinEffect,
		Rounds: a.s.Plan.Initial, StepRounds: a.s.Plan.Step, MaxRounds: a.s.Plan.Max, Note: note})
	if errors.Is(err, store.ErrConflict) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("bisect: start step: %w", err)
	}
	a.bs.DeviceID = dev
	a.b.log.InfoContext(ctx, "bisect: step started", "bisection_id", a.bs.ID, "step", step.Step, "kind", p.Kind,
		"a", build.ID, "b", other.ID, "device_id", dev, "runs", len(runs))
	return nil
}

// device picks the device for pair p: the bisection's own when it is
// online and runs both builds, else the first other such device of the
// model (not avoid). "" with a.waiting set when there is none now.
func (a *advancer) device(ctx context.Context, p Pair, avoid string) (string, error) {
	devs, err := a.b.cfg.Store.BisectionDevices(ctx, &store.BisectionDevicesParams{DeviceModel: a.bs.DeviceModel, Emulated: a.bs.Emulated,
		Builds: []string{a.s.Builds[p.A].ID, a.s.Builds[p.B].ID}})
	if err != nil {
		return "", err
	}
	pick := ""
	for _, d := range devs {
		if d.ID == avoid {
			continue
		}
		if d.ID == a.bs.DeviceID {
			return d.ID, nil
		}
		if pick == "" {
			pick = d.ID
		}
	}
	if pick == "" {
		a.waiting = fmt.Sprintf("waiting for an online device of model %s that runs both %s and %s", a.bs.DeviceModel, a.s.Builds[p.A].ID, a.s.Builds[p.B].ID)
	}
	return pick, nil
}

// Cancel ends running bisection id as cancelled (why) and cancels the
// runs of its running step; ErrNotFound for an unknown id, and
// store.ErrConflict when it has already ended.
func (b *Bisector) Cancel(ctx context.Context, id int64, why string) (*store.Bisection, error) {
	st := b.cfg.Store
	var done bool
	for try := 0; try < 50 && !done; try++ {
		ran, err := st.WithBisectionLock(ctx, id, func() error {
			bs, err := st.GetBisection(ctx, id)
			if err != nil {
				return err
			}
			if bs.State != store.BisectionRunning {
				return store.ErrConflict
			}
			var s Search
			if err := json.Unmarshal(bs.Search, &s); err != nil {
				return err
			}
			steps, err := st.BisectionSteps(ctx, id)
			if err != nil {
				return err
			}
			a := &advancer{b: b, bs: bs, s: &s, aborted: -maxAborts}
			for i := range steps {
				if steps[i].State == store.StepRunning {
					if err := a.abort(ctx, &steps[i], "the bisection was cancelled: "+why, nil); err != nil {
						return err
					}
				}
			}
			s.Cancel("cancelled: " + why)
			if a.spent, a.runs, err = st.BisectionDeviceTime(ctx, id); err != nil {
				return err
			}
			return a.save(ctx)
		})
		if err != nil {
			return nil, err
		}
		if done = ran; !done {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return st.GetBisection(ctx, id)
}
