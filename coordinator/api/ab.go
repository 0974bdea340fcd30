package api

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/lesfarm/lesfarm/coordinator/abtest"
	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/jobs"
)

// abHandler serves /v1/ab: A/B comparisons of a build with a baseline
// (created by POST /v1/runs with a baseline). Reading a comparison
// advances it: once all its runs ended it is decided, and while the answer
// is unknown the next rounds are queued (up to its budget). Any number of
// coordinators may serve it: the store adds a round once per observed
// round count and stores a verdict once.
type abHandler struct {
	st        *store.Store
	canceller Canceller
	log       *slog.Logger
	created   func()
}

// registerAB registers the /v1/ab operations. RegisterTrigger calls it,
// so the A/B routes come with the runs (POST /v1/runs creates
// comparisons).
func (h *runHandler) registerAB(api huma.API) {
	ab := &abHandler{st: h.st, canceller: h.canceller, log: h.log, created: h.created}
	ab.RegisterGet(api)
	ab.RegisterList(api)
}

type abIDInput struct {
	ID int64 `path:"id" minimum:"1" doc:"Comparison id." example:"12"`
}

type abOutput struct {
	Body *ABComparison
}

// RegisterGet registers GET /v1/ab/{id}.
func (h *abHandler) RegisterGet(api huma.API) {
	huma.Register(api, huma.Operation{
		OperationID: "get-ab", Method: http.MethodGet, Path: "/v1/ab/{id}",
		Summary: "Get an A/B comparison, advancing it", Tags: []string{"runs"},
		Description: "Returns the comparison with its runs and the decision per device, config and metric. When all its runs have ended it is decided: a verdict is stored, or, while undecided and within its budget, the next rounds are queued. `lesfarm run --baseline --wait` polls this.",
		Errors:      []int{http.StatusNotFound},
	}, func(ctx context.Context, in *abIDInput) (*abOutput, error) {
		out, err := h.advance(ctx, in.ID)
		if err != nil {
			return nil, storeErr(ctx, h.log, "ab comparison", err)
		}
		return &abOutput{Body: out}, nil
	})
}

type listABInput struct {
	Build string `query:"build" maxLength:"200" doc:"Only comparisons of this build: under test, as baseline or either (side)." example:"ci-4812"`
	Side  string `query:"side" enum:"build,baseline,either" default:"build" doc:"With build: build lists the comparisons where it is under test, baseline those where it is the baseline, either both." example:"either"`
	Limit int    `query:"limit" minimum:"1" maximum:"200" default:"20" doc:"Most comparisons returned." example:"20"`
}

type listABOutput struct {
	Body struct {
		Items []ABComparison `json:"items" doc:"Comparisons, newest first, as stored (runs omitted)."`
	}
}

// RegisterList registers GET /v1/ab.
func (h *abHandler) RegisterList(api huma.API) {
	huma.Register(api, huma.Operation{
		OperationID: "list-ab", Method: http.MethodGet, Path: "/v1/ab",
		Summary: "List A/B comparisons, newest first", Tags: []string{"runs"},
	}, func(ctx context.Context, in *listABInput) (*listABOutput, error) {
		abs, err := h.st.ListABsOf(ctx, in.Build, in.Side, in.Limit)
		if err != nil {
			return nil, storeErr(ctx, h.log, "ab comparisons", err)
		}
		out := &listABOutput{}
		out.Body.Items = []ABComparison{}
		for i := range abs {
			out.Body.Items = append(out.Body.Items, *abFromStore(&abs[i], storedDoc(&abs[i]), nil))
		}
		return out, nil
	})
}

func storedDoc(a *store.ABComparison) *abDecisionDoc {
	if len(a.Decision) == 0 {
		return nil
	}
	var doc abDecisionDoc
	if json.Unmarshal(a.Decision, &doc) != nil {
		return nil
	}
	return &doc
}

// advance reads comparison id and moves it on: once every run ended (or a
// run ended build_failed) it decides; an unknown answer within the budget
// queues the next rounds, any other answer is stored as the verdict (and a
// failed comparison's remaining runs are cancelled).
func (h *abHandler) advance(ctx context.Context, id int64) (*ABComparison, error) {
	a, err := h.st.GetAB(ctx, id)
	if err != nil {
		return nil, err
	}
	runs, err := h.runStates(ctx, a)
	if err != nil {
		return nil, err
	}
	if a.State == store.ABDone {
		return abFromStore(a, storedDoc(a), runs), nil
	}
	// A bisection's step (bisect.go) is advanced by its bisection only.
	if owner, err := h.st.ABBisection(ctx, id); err != nil || owner != 0 {
		return abFromStore(a, storedDoc(a), runs), err
	}
	samples, err := h.st.ABSamples(ctx, id)
	if err != nil {
		return nil, err
	}
	verdict, doc := decideAB(a, samples, runs)
	raw, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	switch {
	case verdict == abFailed:
		if err := h.finish(ctx, a, verdict, raw); err != nil {
			return nil, err
		}
		h.cancelRest(ctx, a, runs, "A/B comparison failed: "+doc.Summary)
	case !allRunsTerminal(runs):
		if err := h.st.SetABDecision(ctx, id, raw); err != nil {
			return nil, err
		}
		return abFromStore(a, doc, runs), nil
	case verdict == string(abtest.Inconclusive):
		plan := abtest.Plan{Initial: a.InitialRounds, Step: a.StepRounds, Max: a.MaxRounds}
		if more := plan.More(a.Rounds, abtest.Unknown); more > 0 {
			added, err := h.st.AddABRounds(ctx, id, a.Rounds, more)
			if err != nil {
				return nil, err
			}
			if err := h.st.SetABDecision(ctx, id, raw); err != nil {
				return nil, err
			}
			if len(added) > 0 {
				h.log.InfoContext(ctx, "api: ab rounds added", "ab_id", id, "rounds", a.Rounds+more, "runs", len(added))
				if h.created != nil {
					h.created()
				}
			}
			break
		}
		if err := h.finish(ctx, a, verdict, raw); err != nil {
			return nil, err
		}
	default:
		if err := h.finish(ctx, a, verdict, raw); err != nil {
			return nil, err
		}
	}
	if a, err = h.st.GetAB(ctx, id); err != nil {
		return nil, err
	}
	if runs, err = h.runStates(ctx, a); err != nil {
		return nil, err
	}
	return abFromStore(a, cmp.Or(storedDoc(a), doc), runs), nil
}

// finish stores the verdict; a concurrent reader that stored one first wins.
func (h *abHandler) finish(ctx context.Context, a *store.ABComparison, verdict string, raw []byte) error {
	err := h.st.FinishAB(ctx, a.ID, verdict, raw)
	if err == nil {
		h.log.InfoContext(ctx, "api: ab decided", "ab_id", a.ID, "build", a.Build, "baseline", a.Baseline, "verdict", verdict, "rounds", a.Rounds)
	}
	if errors.Is(err, store.ErrConflict) {
		return nil
	}
	return err
}

// cancelRest cancels the comparison's runs that have not ended.
func (h *abHandler) cancelRest(ctx context.Context, a *store.ABComparison, runs []ABRunState, reason string) {
	for _, r := range runs {
		if store.TerminalState(r.State) {
			continue
		}
		before, err := h.st.CancelRun(ctx, r.RunID, reason)
		if err != nil {
			continue // it ended meanwhile
		}
		if h.canceller != nil && before.Token != 0 {
			if err := h.canceller.CancelRun(ctx, r.RunID); err != nil {
				h.log.WarnContext(ctx, "api: ab cancel push failed", "ab_id", a.ID, "run_id", r.RunID, "err", err)
			}
		}
	}
}

// runStates reads the comparison's runs with their states and, for
// queued ones, why they wait.
func (h *abHandler) runStates(ctx context.Context, a *store.ABComparison) ([]ABRunState, error) {
	abRuns, err := h.st.ABRuns(ctx, a.ID)
	if err != nil {
		return nil, err
	}
	ids := make([]int64, len(abRuns))
	for i, r := range abRuns {
		ids[i] = r.RunID
	}
	runs, err := h.st.RunsByIDs(ctx, ids)
	if err != nil {
		return nil, err
	}
	if err := h.st.FillWaitingReasons(ctx, runs); err != nil {
		return nil, err
	}
	byID := make(map[int64]*store.Run, len(runs))
	for i := range runs {
		byID[runs[i].ID] = &runs[i]
	}
	out := make([]ABRunState, 0, len(abRuns))
	for _, ar := range abRuns {
		s := ABRunState{RunID: ar.RunID, Round: ar.Round, Side: ar.Side, DeviceID: ar.DeviceID, State: store.RunCancelled, Build: a.Build}
		if ar.Side == store.ABSideA {
			s.Build = a.Baseline
		}
		if r := byID[ar.RunID]; r != nil {
			s.State, s.Progress, s.Error, s.WaitingReason = r.State, r.Progress, r.Error, r.WaitingReason
		}
		out = append(out, s)
	}
	return out, nil
}

// triggerAB is POST /v1/runs with a baseline: it resolves and checks the
// baseline (an unknown build, or one of another lineage, is a one-line
// 422), takes the suite's A/B policy and the body's overrides, and creates
// the comparison with its first rounds.
func (h *runHandler) triggerAB(ctx context.Context, in *triggerInput, spec *jobs.Spec, sel *jobs.Selector) (*triggerOutput, error) {
	body := &in.Body
	if body.Build == "" {
		return nil, refusal("a baseline needs a build to compare with it", "body.baseline", body.Baseline)
	}
	if in.Wait {
		return nil, refusal("wait=true is not supported with a baseline: follow GET /v1/ab/{id} (lesfarm run --baseline --wait does)", "query.wait", true)
	}
	build, err := h.st.GetBuild(ctx, body.Build)
	if err != nil {
		return nil, storeErr(ctx, h.log, "build", err) // requireBuild checked it is registered
	}
	baseline := body.Baseline
	if baseline == BaselineAuto {
		baseline, err = h.st.PreviousBuildWithResults(ctx, build.ID, spec.SuiteName())
		if errors.Is(err, store.ErrNotFound) {
			return nil, refusal(fmt.Sprintf("no build before %q in lineage %s has results in suite %s; name the baseline", build.ID, build.Lineage, spec.SuiteName()), "body.baseline", body.Baseline)
		}
		if err != nil {
			return nil, storeErr(ctx, h.log, "baseline", err)
		}
	}
	base, err := h.st.GetBuild(ctx, baseline)
	if errors.Is(err, store.ErrNotFound) {
		return nil, refusal("baseline "+unknownBuild(ctx, h.st, baseline), "body.baseline", baseline)
	}
	if err != nil {
		return nil, storeErr(ctx, h.log, "baseline", err)
	}
	if base.Lineage != build.Lineage {
		return nil, refusal(fmt.Sprintf("baseline %q is of lineage %s, build %q of lineage %s: compare builds of one lineage", base.ID, base.Lineage, build.ID, build.Lineage), "body.baseline", baseline)
	}
	pol, err := h.st.GetABPolicy(ctx, spec.SuiteName())
	if errors.Is(err, store.ErrNotFound) {
		pol, err = &store.ABPolicy{}, nil
	}
	if err != nil {
		return nil, storeErr(ctx, h.log, "ab policy", err)
	}
	plan := abtest.Plan{Initial: pol.InitialRounds, Step: pol.StepRounds, Max: cmp.Or(body.MaxRounds, pol.MaxRounds)}
	if body.MaxRounds > 0 && plan.Initial == 0 {
		plan.Initial = min(abtest.DefaultInitialRounds, body.MaxRounds)
	}
	plan = plan.WithDefaults()
	minEffect := cmp.Or(body.MinEffect, pol.MinEffect, abtest.DefaultMinEffect)
	ab, runs, err := h.st.CreateAB(ctx, &store.CreateABParams{Spec: spec, Build: build.ID, GitSHA: body.GitSHA, Baseline: base.ID,
		Lineage: build.Lineage, Selector: sel, MinEffect: minEffect, InitialRounds: plan.Initial, StepRounds: plan.Step, MaxRounds: plan.Max})
	if errors.Is(err, store.ErrNoABDevices) {
		return nil, huma.Error409Conflict(fmt.Sprintf("no online, undrained device matching the selector can run both %s and %s", build.ID, base.ID),
			&huma.ErrorDetail{Location: "body.devices", Message: "no device runs both builds"})
	}
	if err != nil {
		return nil, storeErr(ctx, h.log, "ab comparison", err)
	}
	if h.created != nil {
		h.created()
	}
	h.log.InfoContext(ctx, "api: ab comparison triggered", "ab_id", ab.ID, "suite", ab.Suite, "build", ab.Build, "baseline", ab.Baseline,
		"devices", len(ab.Devices), "rounds", ab.Rounds, "runs", len(runs))
	tr, err := h.st.GetTrigger(ctx, ab.TriggerID)
	if err != nil {
		return nil, storeErr(ctx, h.log, "trigger", err)
	}
	states := make([]ABRunState, 0, len(runs))
	for i, r := range runs {
		side := store.ABSideB
		if r.TriggerID == ab.BaselineTriggerID {
			side = store.ABSideA
		}
		states = append(states, ABRunState{RunID: r.ID, Round: i / (2 * len(ab.Devices)), Side: side, Build: r.Build, DeviceID: r.TargetDeviceID, State: r.State})
	}
	set := &TriggerResult{RunSet: RunSet{Trigger: triggerFromStore(tr), Runs: runsFromStore(runs)}, AB: abFromStore(ab, nil, states)}
	return &triggerOutput{Status: http.StatusCreated, Body: set}, nil
}

// BaselineAuto is the baseline that resolves to the newest earlier build
// of the build's lineage with results in the suite.
const BaselineAuto = "auto"

// TriggerResult is POST /v1/runs's answer: the trigger with its runs and,
// for a trigger with a baseline, the A/B comparison.
type TriggerResult struct {
	RunSet
	AB *ABComparison `json:"ab,omitempty" doc:"The A/B comparison, when the trigger named a baseline; follow it with GET /v1/ab/{id}."`
}
