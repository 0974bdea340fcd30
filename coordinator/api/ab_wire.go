package api

import (
	"time"

	"github.com/lesfarm/lesfarm/coordinator/store"
)

// ABComparison is an A/B comparison of a build with a baseline build
// (docs/ab.md): its budget, its runs and the decision per device, config
// and metric.
type ABComparison struct {
	ID                int64        `json:"id" doc:"Comparison id; GET /v1/ab/{id} reads (and advances) it." example:"12"`
	Suite             string       `json:"suite" doc:"Suite whose configs are compared." example:"les-ladder"`
	Build             string       `json:"build" doc:"Build under test (side B)." example:"ci-4812"`
	Baseline          string       `json:"baseline" doc:"Baseline build (side A), of the same lineage." example:"ci-4811"`
	Lineage           string       `json:"lineage" doc:"Lineage of both builds." example:"main"`
	TriggerID         int64        `json:"trigger_id" doc:"Trigger of the build's runs." example:"977"`
	BaselineTriggerID int64        `json:"baseline_trigger_id" doc:"Trigger of the baseline's runs." example:"978"`
	Devices           []string     `json:"devices" doc:"Devices both builds run on, each its own comparison." example:"[\"pixel8-a1\"]"`
	MinEffect         float64      `json:"min_effect" doc:"Smallest relative change reported (0.02 is 2%)." example:"0.02"`
	InitialRounds     int          `json:"initial_rounds" doc:"Rounds run before the first decision; a round is one run of each build per device." example:"6"`
	StepRounds        int          `json:"step_rounds" doc:"Rounds added while the answer is unknown." example:"6"`
	MaxRounds         int          `json:"max_rounds" doc:"Most rounds the comparison may run." example:"30"`
	Rounds            int          `json:"rounds" doc:"Rounds created so far." example:"6"`
	State             string       `json:"state" enum:"running,done" doc:"running until a verdict is stored." example:"running"`
	Verdict           string       `json:"verdict,omitempty" enum:"regression,improvement,same,unknown,failed" doc:"regression: some config and metric got worse by at least min_effect (p ≤ 0.01); improvement: only better; same: every comparison same; unknown: the budget ran out undecided; failed: a build failed, or too few runs succeeded." example:"regression"`
	Summary           string       `json:"summary,omitempty" doc:"One line: the verdict and its worst change." example:"regression: pixel8-a1 mode=lookahead decode_tps -13.1% [-14.0%, -12.2%] (p 0.0002)"`
	Decisions         []ABDecision `json:"decisions" doc:"The decision per device, config and metric (the latest, while running)."`
	Problems          []string     `json:"problems,omitempty" doc:"Why the comparison failed or lost samples: build failures, runs that did not succeed." example:"[\"build failed: run 4812 on pixel8-a1: exit status 2\"]"`
	Runs              []ABRunState `json:"runs" doc:"Its runs in round order."`
	CreatedAt         time.Time    `json:"created_at" doc:"When the comparison was created." example:"2026-12-01T14:00:00Z"`
	FinishedAt        *time.Time   `json:"finished_at,omitempty" doc:"When the verdict was stored." example:"2026-12-01T14:40:00Z"`
}

// ABDecision is the comparison of one metric of one config on one device.
type ABDecision struct {
	DeviceID      string  `json:"device_id" doc:"Device both sides ran on." example:"pixel8-a1"`
	ConfigKey     string  `json:"config_key" doc:"Config compared." example:"mode=lookahead,budget=25%"`
	Metric        string  `json:"metric" enum:"decode_tps,prefill_tps,ttft_ms" doc:"Metric compared (one value per run: its mean over the run's repetitions)." example:"decode_tps"`
	Verdict       string  `json:"verdict" enum:"different,same,unknown" doc:"The test's answer." example:"different"`
	Outcome       string  `json:"outcome" enum:"regression,improvement,same,unknown" doc:"The answer read in the metric's direction." example:"regression"`
	P             float64 `json:"p" doc:"min(p_ks, p_mwu)." example:"0.0002"`
	PKS           float64 `json:"p_ks" doc:"Two-sample Kolmogorov–Smirnov p-value." example:"0.0002"`
	PMWU          float64 `json:"p_mwu" doc:"Mann–Whitney U p-value (tie-corrected)." example:"0.0004"`
	SameThreshold float64 `json:"same_threshold" doc:"p-value above which the sides are the same (1: too few samples to say so)." example:"0.4"`
	Change        float64 `json:"change" doc:"Hodges–Lehmann change of the build over the baseline, relative (−0.05 is 5% lower)." example:"-0.131"`
	Low           float64 `json:"change_low" doc:"Lower end of the change's confidence interval." example:"-0.14"`
	High          float64 `json:"change_high" doc:"Upper end of the change's confidence interval." example:"-0.122"`
	Level         float64 `json:"level" doc:"Confidence of the interval." example:"0.95"`
	CV            float64 `json:"cv" doc:"Pooled coefficient of variation of the samples." example:"0.012"`
	MeanA         float64 `json:"mean_a" doc:"Mean of the baseline's samples." example:"14.2"`
	MeanB         float64 `json:"mean_b" doc:"Mean of the build's samples." example:"12.3"`
	NA            int     `json:"n_a" doc:"Baseline samples (succeeded runs with a valid result)." example:"6"`
	NB            int     `json:"n_b" doc:"Build samples." example:"6"`
	Reason        string  `json:"reason" doc:"Why this verdict." example:"p 0.0002 ≤ 0.01 and the change -13.1% is at least 2.0%"`
}

// ABRunState is one run of a comparison.
type ABRunState struct {
	RunID         int64   `json:"run_id" doc:"Run id." example:"4812"`
	Round         int     `json:"round" doc:"Round (0-based); even rounds run the baseline first, odd ones the build." example:"0"`
	Side          string  `json:"side" enum:"a,b" doc:"a: the baseline; b: the build under test." example:"b"`
	Build         string  `json:"build" doc:"Build it runs." example:"ci-4812"`
	DeviceID      string  `json:"device_id" doc:"Device it is pinned to." example:"pixel8-a1"`
	State         string  `json:"state" doc:"Run state (see Run.state)." example:"succeeded"`
	Progress      float64 `json:"progress,omitempty" doc:"Share done, 0 to 1." example:"0.5"`
	Error         string  `json:"error,omitempty" doc:"Why it did not succeed." example:"exit status 2"`
	WaitingReason string  `json:"waiting_reason,omitempty" doc:"Why it waits while queued." example:"waiting for a free device: 1 online device(s) can run it, all busy"`
}

// abDecisionDoc is what ab_comparisons.decision stores.
type abDecisionDoc struct {
	Summary   string       `json:"summary"`
	Decisions []ABDecision `json:"decisions"`
	Problems  []string     `json:"problems,omitempty"`
}

func abFromStore(a *store.ABComparison, doc *abDecisionDoc, runs []ABRunState) *ABComparison {
	out := &ABComparison{ID: a.ID, Suite: a.Suite, Build: a.Build, Baseline: a.Baseline, Lineage: a.Lineage, TriggerID: a.TriggerID,
		BaselineTriggerID: a.BaselineTriggerID, Devices: nonNil(a.Devices), MinEffect: a.MinEffect, InitialRounds: a.InitialRounds,
		StepRounds: a.StepRounds, MaxRounds: a.MaxRounds, Rounds: a.Rounds, State: a.State, Verdict: a.Verdict,
		Decisions: []ABDecision{}, Runs: runs, CreatedAt: a.CreatedAt, FinishedAt: a.FinishedAt}
	if out.Runs == nil {
		out.Runs = []ABRunState{}
	}
	if doc != nil {
		out.Summary, out.Problems = doc.Summary, doc.Problems
		if doc.Decisions != nil {
			out.Decisions = doc.Decisions
		}
	}
	return out
}
