package bisect

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/lesfarm/lesfarm/coordinator/abtest"
	"github.com/lesfarm/lesfarm/coordinator/store"
)

// Metrics a bisection decides on: the A/B gate's (docs/ab.md), read in
// their better direction.
var metrics = []struct {
	name           string
	higherIsBetter bool
	value          func(*store.ABSample) float64
}{
	{"decode_tps", true, func(s *store.ABSample) float64 { return s.DecodeTPS }},
	{"prefill_tps", true, func(s *store.ABSample) float64 { return s.PrefillTPS }},
	{"ttft_ms", false, func(s *store.ABSample) float64 { return s.TTFTms }},
}

// Decidable reports whether a bisection can decide on metric (one of the
// A/B gate's metrics).
func Decidable(metric string) bool {
	for _, m := range metrics {
		if m.name == metric {
			return true
		}
	}
	return false
}

func higherIsBetter(metric string) bool {
	for _, m := range metrics {
		if m.name == metric {
			return m.higherIsBetter
		}
	}
	return true
}

// Comparison is one config and metric of a step: the A/B comparison of
// build A's samples (side a) with build B's. Its JSON names are the A/B
// gate's (api.ABDecision), so GET /v1/ab/{id} of a step's comparison
// shows it too.
type Comparison struct {
	DeviceID  string  `json:"device_id"`
	ConfigKey string  `json:"config_key"`
	Metric    string  `json:"metric"`
	Verdict   string  `json:"verdict"`
	Outcome   string  `json:"outcome"`
	P         float64 `json:"p"`
	PKS       float64 `json:"p_ks"`
	PMWU      float64 `json:"p_mwu"`
	SameThr   float64 `json:"same_threshold"`
	Change    float64 `json:"change"`
	Low       float64 `json:"change_low"`
	High      float64 `json:"change_high"`
	Level     float64 `json:"level"`
	CV        float64 `json:"cv"`
	MeanA     float64 `json:"mean_a"`
	MeanB     float64 `json:"mean_b"`
	NA        int     `json:"n_a"`
	NB        int     `json:"n_b"`
	Reason    string  `json:"reason"`
	// Decides is true for the bisected alert's config and metric, the
	// comparison the step is judged by.
	Decides bool `json:"decides,omitempty"`
}

// Evidence is what a step stores: its judgement in one line and every
// comparison (the deciding one first).
type Evidence struct {
	Summary   string       `json:"summary"`
	Judgement Judgement    `json:"judgement"`
	Decisions []Comparison `json:"decisions"`
}

func comparisonOf(dev, config, metric string, a, b []float64, c abtest.Comparison) Comparison {
	return Comparison{DeviceID: dev, ConfigKey: config, Metric: metric, Verdict: string(c.Verdict),
		Outcome: string(abtest.OutcomeOf(c, higherIsBetter(metric))), P: c.P, PKS: c.PKS, PMWU: c.PMWU, SameThr: c.SameThreshold,
		Change: c.Shift.Change, Low: c.Shift.Low, High: c.Shift.High, Level: c.Shift.Level, CV: c.CV,
		MeanA: meanOf(a), MeanB: meanOf(b), NA: c.NA, NB: c.NB, Reason: c.Reason}
}

func meanOf(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	var s float64
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

// step drives the running step: it aborts it (and the search skips or
// fails a build, or the pair is run again on another device) when one of
// its builds was deleted or failed, when its device was lost while
// another of the model can take the step, or when a run ended without a
// result; once all its runs succeeded it judges the deciding comparison
// and adds rounds while undecided and affordable, else records the
// judgement in the search and finishes the step.
func (a *advancer) step(ctx context.Context, cur *store.BisectionStep) error {
	st := a.b.cfg.Store
	p := Pair{A: cur.AIndex, B: cur.BIndex, Kind: cur.Kind}
	if p.A < 0 || p.B < 0 || p.A >= len(a.s.Builds) || p.B >= len(a.s.Builds) {
		return fmt.Errorf("bisect: bisection %d step %d: pair %d/%d outside its %d builds", a.bs.ID, cur.Step, p.A, p.B, len(a.s.Builds))
	}
	// A build deleted mid-bisection: its runs can no longer start (or
	// prove what they ran). Leave it out, or fail on an endpoint.
	for _, i := range []int{p.A, p.B} {
		if _, err := st.GetBuild(ctx, a.s.Builds[i].ID); errors.Is(err, store.ErrNotFound) {
			why := "deleted mid-bisection"
			return a.abort(ctx, cur, fmt.Sprintf("build %s was deleted mid-bisection", a.s.Builds[i].ID), func() { a.s.Skip(i, why) })
		} else if err != nil {
			return err
		}
	}
	abRuns, err := st.ABRuns(ctx, cur.ABID)
	if err != nil {
		return err
	}
	ids := make([]int64, len(abRuns))
	for i, r := range abRuns {
		ids[i] = r.RunID
	}
	runs, err := st.RunsByIDs(ctx, ids)
	if err != nil {
		return err
	}
	terminal := true
	var lost []string
	for _, r := range runs {
		switch {
		case r.State == store.RunBuildFailed:
			i := p.B
			if r.Build == a.s.Builds[p.A].ID {
				i = p.A
			}
			why := fmt.Sprintf("failed to run on %s (run %d: %s)", cur.DeviceID, r.ID, oneLine(r.Error))
			return a.abort(ctx, cur, fmt.Sprintf("build %s %s", r.Build, why), func() { a.s.Skip(i, why) })
		case !store.TerminalState(r.State):
			terminal = false
		case r.State != store.RunSucceeded:
			lost = append(lost, fmt.Sprintf("run %d %s: %s", r.ID, r.State, oneLine(r.Error)))
		}
	}
	if len(lost) > 0 {
		// A run that ended without a result (infrastructure failure past
		// its attempts, cancelled by someone): the step's rounds are no
		// longer balanced. Run the step again from scratch, so no sample
		// is counted twice and none is missing.
		return a.abort(ctx, cur, fmt.Sprintf("%d run(s) ended without a result (%s); the step runs again", len(lost), joinMax(lost, 1)), nil)
	}
	if !terminal {
		dev, err := st.GetDevice(ctx, cur.DeviceID)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		if dev == nil || dev.State != "online" || dev.Drained {
			state := "gone"
			if dev != nil {
				state = dev.State
				if dev.Drained {
					state = "drained"
				}
			}
			other, err := a.device(ctx, p, cur.DeviceID)
			if err != nil {
				return err
			}
			if other == "" {
				a.waiting = ""
				return st.SetBisectionStepNote(ctx, a.bs.ID, cur.Step, fmt.Sprintf("device %s is %s: waiting for it or another online device of model %s", cur.DeviceID, state, a.bs.DeviceModel))
			}
			a.bs.DeviceID = other
			return a.abort(ctx, cur, fmt.Sprintf("device %s is %s mid-step: the step runs again on %s", cur.DeviceID, state, other), nil)
		}
		return nil
	}
	samples, err := st.ABSamples(ctx, cur.ABID)
	if err != nil {
		return err
	}
	ev, c, ok := a.evidence(p, cur, samples)
	if !ok {
		a.s.Fail(fmt.Sprintf("step %d (%s vs %s): no valid result of config %s %s on %s", cur.Step, cur.BuildB, cur.BuildA, a.bs.Config, a.bs.Metric, cur.DeviceID))
		return a.finish(ctx, cur, Undecided, ev, "failed")
	}
	j := a.s.Judge(p, c)
	if more := a.s.More(cur.Rounds, j, a.spent, a.runs); more > 0 {
		added, err := st.AddABRounds(ctx, cur.ABID, cur.Rounds, more)
		if err != nil {
			return err
		}
		a.b.log.InfoContext(ctx, "bisect: rounds added", "bisection_id", a.bs.ID, "step", cur.Step, "rounds", cur.Rounds+more, "runs", len(added))
		return nil
	}
	ev.Judgement = j
	ev.Summary = fmt.Sprintf("%s: %s", judgementText(p, j, a.s.Builds), ev.Summary)
	a.s.Record(p, c, j)
	verdict := string(abtest.OutcomeOf(c, higherIsBetter(a.bs.Metric)))
	return a.finish(ctx, cur, j, ev, verdict)
}

// judgementText says what a judgement means for the pair's builds.
func judgementText(p Pair, j Judgement, builds []Build) string {
	a, b := builds[p.A].ID, builds[p.B].ID
	switch p.Kind {
	case KindVerify:
		switch j {
		case Differs:
			return "reproduced: " + b + " differs from " + a
		case Matches:
			return "not reproduced: " + b + " is the same as " + a
		case Opposite:
			return "not reproduced: " + b + " changed the other way"
		}
	case KindBisect:
		switch j {
		case Differs:
			return b + " is bad"
		case Matches:
			return b + " is good"
		case Opposite:
			return b + " changed the other way"
		}
	case KindRecheck:
		switch j {
		case Differs:
			return a + " is good (differs from bad " + b + ")"
		case Matches:
			return a + " is bad (same as " + b + ")"
		case Opposite:
			return a + " differs from " + b + " the other way"
		}
	}
	return "undecided"
}

// evidence compares every config and metric of the step's samples on its
// device; c is the deciding comparison (the bisection's config and
// metric), ok false when it has no sample on a side.
func (a *advancer) evidence(p Pair, cur *store.BisectionStep, samples []store.ABSample) (*Evidence, abtest.Comparison, bool) {
	type side struct{ a, b []*store.ABSample }
	groups := map[string]*side{}
	var order []string
	for i := range samples {
		s := &samples[i]
		if s.DeviceID != cur.DeviceID {
			continue
		}
		g := groups[s.ConfigKey]
		if g == nil {
			g = &side{}
			groups[s.ConfigKey] = g
			order = append(order, s.ConfigKey)
		}
		if s.Side == store.ABSideA {
			g.a = append(g.a, s)
		} else {
			g.b = append(g.b, s)
		}
	}
	ev := &Evidence{Decisions: []Comparison{}}
	var decide abtest.Comparison
	ok := false
	for _, cfg := range order {
		g := groups[cfg]
		for _, m := range metrics {
			av, bv := values(g.a, m.value), values(g.b, m.value)
			decides := cfg == a.bs.Config && m.name == a.bs.Metric
			opts := abtest.Options{Level: DefaultLevel}
			if decides {
				opts = a.s.Options(p)
			}
			c := abtest.Compare(av, bv, opts)
			cmpn := comparisonOf(cur.DeviceID, cfg, m.name, av, bv, c)
			cmpn.Decides = decides
			if decides {
				decide, ok = c, c.NA > 0 && c.NB > 0
				ev.Decisions = append([]Comparison{cmpn}, ev.Decisions...)
				ev.Summary = fmt.Sprintf("%s %s %+.1f%% [%+.1f%%, %+.1f%%] (%.4g → %.4g), p %.2g, %d+%d runs", cfg, m.name,
					100*c.Shift.Change, 100*c.Shift.Low, 100*c.Shift.High, cmpn.MeanA, cmpn.MeanB, c.P, c.NA, c.NB)
				continue
			}
			ev.Decisions = append(ev.Decisions, cmpn)
		}
	}
	return ev, decide, ok
}

func values(ss []*store.ABSample, f func(*store.ABSample) float64) []float64 {
	out := make([]float64, len(ss))
	for i, s := range ss {
		out[i] = f(s)
	}
	return out
}

// finish ends the step as done with its evidence.
func (a *advancer) finish(ctx context.Context, cur *store.BisectionStep, j Judgement, ev *Evidence, verdict string) error {
	raw, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	if err := a.b.cfg.Store.FinishBisectionStep(ctx, a.bs.ID, cur.Step, store.StepDone, string(j), verdict, raw, ""); err != nil && !errors.Is(err, store.ErrConflict) {
		return err
	}
	a.stepEnded = true
	a.b.log.InfoContext(ctx, "bisect: step decided", "bisection_id", a.bs.ID, "step", cur.Step, "judgement", j, "evidence", ev.Summary)
	return nil
}

// abort ends the step as aborted (why), cancels its runs that have not
// ended and applies then (the search's reaction) — or fails the search
// when too many steps were aborted.
func (a *advancer) abort(ctx context.Context, cur *store.BisectionStep, why string, then func()) error {
	st := a.b.cfg.Store
	abRuns, err := st.ABRuns(ctx, cur.ABID)
	if err != nil {
		return err
	}
	for _, r := range abRuns {
		before, err := st.CancelRun(ctx, r.RunID, fmt.Sprintf("bisection %d step %d aborted: %s", a.bs.ID, cur.Step, why))
		if err != nil {
			continue // it ended meanwhile
		}
		if a.b.cfg.Canceller != nil && before.Token != 0 {
			if err := a.b.cfg.Canceller.CancelRun(ctx, r.RunID); err != nil {
				a.b.log.WarnContext(ctx, "bisect: cancel push failed", "bisection_id", a.bs.ID, "run_id", r.RunID, "err", err)
			}
		}
	}
	raw, _ := json.Marshal(&Evidence{Summary: "aborted: " + why, Decisions: []Comparison{}})
	if err := st.FinishBisectionStep(ctx, a.bs.ID, cur.Step, store.StepAborted, "", "failed", raw, "aborted: "+why); err != nil && !errors.Is(err, store.ErrConflict) {
		return err
	}
	a.stepEnded = true
	a.aborted++
	a.b.log.WarnContext(ctx, "bisect: step aborted", "bisection_id", a.bs.ID, "step", cur.Step, "why", why)
	if then != nil {
		then()
	}
	if a.aborted >= maxAborts && a.s.State == StateRunning {
		a.s.Fail(fmt.Sprintf("%d steps were aborted (the last: %s)", a.aborted, why))
	}
	return nil
}

func oneLine(s string) string {
	if f := strings.Join(strings.Fields(s), " "); f != "" {
		return f
	}
	return "no error recorded"
}
