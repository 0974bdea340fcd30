package api

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/lesfarm/lesfarm/coordinator/bisect"
	"github.com/lesfarm/lesfarm/coordinator/store"
)

// Bisection is the search for the build that caused an alert group's
// change (docs/bisect.md): its range, its steps with their evidence, and
// how it ended.
type Bisection struct {
	ID          int64    `json:"id" doc:"Bisection id; GET /v1/bisections/{id} reads (and advances) it." example:"7"`
	GroupID     int64    `json:"group_id" doc:"Alert group bisected." example:"21"`
	AlertID     int64    `json:"alert_id" doc:"The group's alert it decides on (its config, metric and device model)." example:"55"`
	Suite       string   `json:"suite" doc:"Suite of the alert." example:"les-ladder"`
	Lineage     string   `json:"lineage" doc:"Lineage of the alert and of every build of the range." example:"main"`
	Config      string   `json:"config" doc:"Config each step is judged on." example:"lookahead/budget=25%"`
	Metric      string   `json:"metric" enum:"decode_tps,prefill_tps,ttft_ms" doc:"Metric each step is judged on." example:"decode_tps"`
	Configs     []string `json:"configs" doc:"Configs each step runs: the alert's, then the group's other alerts' on the model." example:"[\"lookahead/budget=25%\"]"`
	DeviceModel string   `json:"device_model" doc:"Device model it runs on (the alert's)." example:"Pixel 8"`
	DeviceID    string   `json:"device_id" doc:"Device of the current (or last) step: the alerting device when it can, else another of the model." example:"pixel8-a1"`
	State       string   `json:"state" enum:"running,culprit,not_reproduced,ambiguous,failed,cancelled" doc:"running until it ends: culprit (first bad and last good build found), not_reproduced (the endpoints are the same), ambiguous (noise or the budget left it undecided, or more than one change), failed (a build of an end was deleted or failed, see reason), cancelled." example:"culprit"`
	Reason      string   `json:"reason,omitempty" doc:"How it ended, or what it waits for, in one line." example:"first bad build ci-4812 (9813d69…), last good build ci-4811 (77aa0b1…): -13.1% between them"`
	Expected    float64  `json:"expected" doc:"The alert's relative change, which the first step checks for." example:"-0.13"`
	Effect      float64  `json:"effect" doc:"The change measured between the endpoints (0 before the first step decided)." example:"-0.131"`
	// LastGood and FirstBad are the range's current ends.
	LastGood BisectionBuild   `json:"last_good" doc:"Newest build known good (the culprit's parent once it ended as culprit)."`
	FirstBad BisectionBuild   `json:"first_bad" doc:"Oldest build known bad (the culprit once it ended as culprit)."`
	Culprit  *Culprit         `json:"culprit,omitempty" doc:"The culprit, when state is culprit."`
	Builds   []BisectionBuild `json:"builds" doc:"The builds of the range in lineage order, with what the bisection knows of each."`
	Steps    []BisectionStep  `json:"steps" doc:"Its A/B comparisons in order (aborted ones included)."`
	// BudgetSeconds and DeviceSeconds: the device-time bound and use.
	BudgetSeconds float64    `json:"budget_seconds" doc:"Device-time budget: no step or round starts that the mean run time says would pass it." example:"28800"`
	DeviceSeconds float64    `json:"device_seconds" doc:"Device time its runs took so far (each run from start to end)." example:"5400"`
	Runs          int        `json:"runs" doc:"Its runs that finished." example:"48"`
	RequestedBy   string     `json:"requested_by,omitempty" doc:"API token that asked for it." example:"ci"`
	CreatedAt     time.Time  `json:"created_at" doc:"When it was asked for." example:"2026-12-01T14:00:00Z"`
	UpdatedAt     time.Time  `json:"updated_at" doc:"When it last moved on." example:"2026-12-01T15:00:00Z"`
	FinishedAt    *time.Time `json:"finished_at,omitempty" doc:"When it ended." example:"2026-12-01T16:00:00Z"`
}

// BisectionBuild is one build of a bisection's range.
type BisectionBuild struct {
	ID       string `json:"id" doc:"Build id." example:"ci-4812"`
	GitSHA   string `json:"git_sha,omitempty" doc:"Its git commit." example:"9813d69a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e"`
	Position int64  `json:"position" doc:"Its position in the lineage." example:"12"`
	State    string `json:"state" enum:"good,bad,untested,skipped" doc:"good: at or before the newest known-good build; bad: at or after the oldest known-bad one; untested: still a candidate; skipped: left out (see skipped)." example:"untested"`
	Skipped  string `json:"skipped,omitempty" doc:"Why it is left out: no executable for the device's platform, deleted, or it failed to run." example:"no executable for linux/arm64, the platform of pixel8-a1"`
}

// Culprit is a bisection's answer: the first bad build and its last good
// predecessor in the lineage, with the commits between them.
type Culprit struct {
	FirstBad BisectionBuild `json:"first_bad" doc:"The first bad build."`
	LastGood BisectionBuild `json:"last_good" doc:"The last good build before it."`
	GitLog   string         `json:"git_log" doc:"The command listing the commits between them." example:"git log 77aa0b1..9813d69"`
	Change   float64        `json:"change" doc:"The change measured between the endpoints (relative)." example:"-0.131"`
}

// BisectionStep is one A/B comparison of a bisection.
type BisectionStep struct {
	Step      int    `json:"step" doc:"Step number, from 1." example:"2"`
	Kind      string `json:"kind" enum:"verify,bisect,recheck" doc:"verify: last good vs first bad; bisect: newest good vs midpoint; recheck: midpoint vs oldest bad, after an undecided bisect step." example:"bisect"`
	BuildA    string `json:"build_a" doc:"Baseline side." example:"ci-4811"`
	BuildB    string `json:"build_b" doc:"Build compared with it." example:"ci-4815"`
	DeviceID  string `json:"device_id" doc:"Device both ran on." example:"pixel8-a1"`
	ABID      int64  `json:"ab_id" doc:"Its A/B comparison (GET /v1/ab/{id}: its runs)." example:"31"`
	State     string `json:"state" enum:"running,done,aborted" doc:"aborted: its device was lost or a run failed; its samples are not counted and the step runs again as a new one." example:"done"`
	Judgement string `json:"judgement,omitempty" enum:"differs,matches,opposite,undecided" doc:"B against A: differs by about the change, matches (no change), opposite (changed the other way), undecided." example:"differs"`
	Rounds    int    `json:"rounds" doc:"Rounds queued (a round is one run of each build, ABBA order)." example:"6"`
	Summary   string `json:"summary,omitempty" doc:"The step's conclusion in one line." example:"ci-4815 is bad: lookahead/budget=25% decode_tps -13.0% [-14.1%, -12.0%] (14.2 → 12.4), p 0.002, 6+6 runs"`
	Note      string `json:"note,omitempty" doc:"Why it was aborted, or what it waits for." example:"device pixel8-a1 is lost mid-step: the step runs again on pixel8-a2"`
	// The deciding comparison's figures.
	NA         int            `json:"n_a" doc:"Samples of build A (runs with a valid result) in the deciding comparison." example:"6"`
	NB         int            `json:"n_b" doc:"Samples of build B." example:"6"`
	P          float64        `json:"p" doc:"min(p_ks, p_mwu) of the deciding comparison." example:"0.002"`
	PKS        float64        `json:"p_ks" doc:"Kolmogorov–Smirnov p-value." example:"0.002"`
	PMWU       float64        `json:"p_mwu" doc:"Mann–Whitney U p-value." example:"0.004"`
	Change     float64        `json:"change" doc:"Hodges–Lehmann change of B over A." example:"-0.13"`
	Low        float64        `json:"change_low" doc:"Lower end of its 95% interval." example:"-0.141"`
	High       float64        `json:"change_high" doc:"Upper end." example:"-0.12"`
	MeanA      float64        `json:"mean_a" doc:"Mean of A's samples." example:"14.2"`
	MeanB      float64        `json:"mean_b" doc:"Mean of B's samples." example:"12.4"`
	Decisions  []ABDecision   `json:"decisions" doc:"Every config and metric compared (the deciding one first)."`
	Runs       map[string]int `json:"runs,omitempty" doc:"Its runs by state." example:"{\"succeeded\":10,\"running\":1,\"queued\":1}"`
	CreatedAt  time.Time      `json:"created_at" doc:"When its runs were queued." example:"2026-12-01T14:00:00Z"`
	FinishedAt *time.Time     `json:"finished_at,omitempty" doc:"When it was decided or aborted." example:"2026-12-01T14:20:00Z"`
}

// BisectionBrief is the bisection an alert group shows (GET
// /v1/alerts/{id}): the newest one of the group.
type BisectionBrief struct {
	ID       int64    `json:"id" doc:"Bisection id (GET /v1/bisections/{id})." example:"7"`
	State    string   `json:"state" doc:"Its state (see Bisection.state)." example:"culprit"`
	Reason   string   `json:"reason,omitempty" doc:"How it ended or what it waits for." example:"first bad build ci-4812 …"`
	Steps    int      `json:"steps" doc:"Steps decided so far." example:"4"`
	Culprit  *Culprit `json:"culprit,omitempty" doc:"The culprit, when found."`
	DeviceID string   `json:"device_id" doc:"Device it runs on." example:"pixel8-a1"`
}

func bisectionBuild(b bisect.Build, i int, s *bisect.Search) BisectionBuild {
	out := BisectionBuild{ID: b.ID, GitSHA: b.GitSHA, Position: b.Position, Skipped: b.Skipped}
	switch {
	case b.Skipped != "":
		out.State = "skipped"
	case i <= s.Lo:
		out.State = "good"
	case i >= s.Hi:
		out.State = "bad"
	default:
		out.State = "untested"
	}
	return out
}

// gitLog is the git command listing the commits from a (excluded) to b:
// by sha when both builds have one, else by build id.
func gitLog(a, b BisectionBuild) string {
	ra, rb := a.GitSHA, b.GitSHA
	if ra == "" || rb == "" {
		return fmt.Sprintf("git log %s..%s  # the builds carry no git sha: name their commits", a.ID, b.ID)
	}
	return fmt.Sprintf("git log %s..%s", ra, rb)
}

func bisectionFromStore(b *store.Bisection, steps []store.BisectionStep, runStates map[int64]map[string]int) *Bisection {
	out := &Bisection{ID: b.ID, GroupID: b.GroupID, AlertID: b.AlertID, Suite: b.Suite, Lineage: b.Lineage, Config: b.Config, Metric: b.Metric,
		Configs: nonNil(b.Configs), DeviceModel: b.DeviceModel, DeviceID: b.DeviceID, State: b.State, Reason: b.Reason,
		BudgetSeconds: b.Budget.Seconds(), DeviceSeconds: b.DeviceTime.Seconds(), Runs: b.Runs, RequestedBy: b.RequestedBy,
		CreatedAt: b.CreatedAt, UpdatedAt: b.UpdatedAt, FinishedAt: b.FinishedAt, Builds: []BisectionBuild{}, Steps: []BisectionStep{}}
	var s bisect.Search
	if json.Unmarshal(b.Search, &s) == nil && len(s.Builds) >= 2 && s.Lo >= 0 && s.Hi < len(s.Builds) {
		out.Expected, out.Effect = s.Expected, s.Effect
		for i, x := range s.Builds {
			out.Builds = append(out.Builds, bisectionBuild(x, i, &s))
		}
		out.LastGood, out.FirstBad = out.Builds[s.Lo], out.Builds[s.Hi]
		if b.State == bisect.StateCulprit {
			out.Culprit = &Culprit{FirstBad: out.FirstBad, LastGood: out.LastGood, GitLog: gitLog(out.LastGood, out.FirstBad), Change: s.Effect}
		}
	}
	for i := range steps {
		out.Steps = append(out.Steps, stepFromStore(&steps[i], runStates[steps[i].ABID]))
	}
	return out
}

func stepFromStore(st *store.BisectionStep, runs map[string]int) BisectionStep {
	out := BisectionStep{Step: st.Step, Kind: st.Kind, BuildA: st.BuildA, BuildB: st.BuildB, DeviceID: st.DeviceID, ABID: st.ABID,
		State: st.State, Judgement: st.Judgement, Rounds: st.Rounds, Note: st.Note, Runs: runs, CreatedAt: st.CreatedAt,
		FinishedAt: st.FinishedAt, Decisions: []ABDecision{}}
	var ev struct {
		Summary   string `json:"summary"`
		Decisions []struct {
			ABDecision
			Decides bool `json:"decides"`
		} `json:"decisions"`
	}
	if len(st.Evidence) > 0 && json.Unmarshal(st.Evidence, &ev) == nil {
		out.Summary = ev.Summary
		for _, d := range ev.Decisions {
			if d.Decides {
				out.NA, out.NB, out.P, out.PKS, out.PMWU = d.NA, d.NB, d.P, d.PKS, d.PMWU
				out.Change, out.Low, out.High, out.MeanA, out.MeanB = d.Change, d.Low, d.High, d.MeanA, d.MeanB
			}
			out.Decisions = append(out.Decisions, d.ABDecision)
		}
	}
	return out
}

func bisectionBrief(b *Bisection) *BisectionBrief {
	steps := 0
	for _, s := range b.Steps {
		if s.State == store.StepDone {
			steps++
		}
	}
	return &BisectionBrief{ID: b.ID, State: b.State, Reason: b.Reason, Steps: steps, Culprit: b.Culprit, DeviceID: b.DeviceID}
}
