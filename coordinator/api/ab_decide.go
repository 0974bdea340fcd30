package api

import (
	"cmp"
	"fmt"
	"math"
	"strings"

	"github.com/lesfarm/lesfarm/coordinator/abtest"
	"github.com/lesfarm/lesfarm/coordinator/store"
)

// abMetric is a metric the A/B gate decides on: the suite metrics the
// regression detector alerts on.
type abMetric struct {
	name           string
	higherIsBetter bool
	value          func(*store.ABSample) float64
}

var abMetrics = []abMetric{
	{"decode_tps", true, func(s *store.ABSample) float64 { return s.DecodeTPS }},
	{"prefill_tps", true, func(s *store.ABSample) float64 { return s.PrefillTPS }},
	{"ttft_ms", false, func(s *store.ABSample) float64 { return s.TTFTms }},
}

// AB verdicts beyond abtest's outcomes.
const abFailed = "failed"

// decideAB decides comparison ab from its samples and its runs' states:
// per device, config and metric, abtest.Compare of the baseline's samples
// (side a) with the build's (side b). The verdict is failed when a run
// ended build_failed, or when every run ended and none gave a sample;
// regression when some comparison is a regression; improvement when some
// is an improvement and none a regression; same when all are the same;
// unknown otherwise (the caller adds rounds while the budget lasts).
func decideAB(ab *store.ABComparison, samples []store.ABSample, runs []ABRunState) (string, *abDecisionDoc) {
	doc := &abDecisionDoc{Decisions: []ABDecision{}}
	failed := false
	for _, r := range runs {
		switch {
		case r.State == store.RunBuildFailed:
			failed = true
			doc.Problems = append(doc.Problems, fmt.Sprintf("build failed: run %d (build %s) on %s: %s", r.RunID, r.Build, r.DeviceID, oneLine(r.Error)))
		case store.TerminalState(r.State) && r.State != store.RunSucceeded:
			doc.Problems = append(doc.Problems, fmt.Sprintf("run %d (build %s) on %s %s: %s", r.RunID, r.Build, r.DeviceID, r.State, oneLine(r.Error)))
		}
	}
	if failed {
		doc.Summary = "failed: " + doc.Problems[0]
		return abFailed, doc
	}
	type key struct{ device, config string }
	var keys []key
	groups := map[key][2][]*store.ABSample{}
	for i := range samples {
		s := &samples[i]
		k := key{s.DeviceID, s.ConfigKey}
		g, ok := groups[k]
		if !ok {
			keys = append(keys, k)
		}
		side := 1
		if s.Side == store.ABSideA {
			side = 0
		}
		g[side] = append(g[side], s)
		groups[k] = g
	}
	if len(keys) == 0 {
		if allRunsTerminal(runs) {
			doc.Summary = "failed: no run of the comparison produced a valid result"
			return abFailed, doc
		}
		doc.Summary = "waiting for results"
		return string(abtest.Inconclusive), doc
	}
	opts := abtest.Options{MinEffect: ab.MinEffect}
	var cs []abtest.Comparison
	for _, k := range keys {
		g := groups[k]
		for _, m := range abMetrics {
			a, b := values(g[0], m.value), values(g[1], m.value)
			c := abtest.Compare(a, b, opts)
			cs = append(cs, c)
			doc.Decisions = append(doc.Decisions, ABDecision{DeviceID: k.device, ConfigKey: k.config, Metric: m.name,
				Verdict: string(c.Verdict), Outcome: string(abtest.OutcomeOf(c, m.higherIsBetter)), P: c.P, PKS: c.PKS, PMWU: c.PMWU,
				SameThreshold: c.SameThreshold, Change: c.Shift.Change, Low: c.Shift.Low, High: c.Shift.High, Level: c.Shift.Level,
				CV: c.CV, MeanA: mean(a), MeanB: mean(b), NA: c.NA, NB: c.NB, Reason: c.Reason})
		}
	}
	worst := func(o abtest.Outcome) *ABDecision {
		var w *ABDecision
		for i := range doc.Decisions {
			d := &doc.Decisions[i]
			if d.Outcome == string(o) && (w == nil || math.Abs(d.Change) > math.Abs(w.Change)) {
				w = d
			}
		}
		return w
	}
	if w := worst(abtest.Regression); w != nil {
		doc.Summary = "regression: " + w.Line()
		return string(abtest.Regression), doc
	}
	if w := worst(abtest.Improvement); w != nil {
		doc.Summary = "improvement: " + w.Line()
		return string(abtest.Improvement), doc
	}
	if abtest.Combine(cs...) == abtest.Same {
		doc.Summary = fmt.Sprintf("same: %d comparison(s), none changed by %.1f%% or more", len(cs), 100*ab.MinEffect)
		return string(abtest.NoChange), doc
	}
	undecided := 0
	for _, c := range cs {
		if c.Verdict == abtest.Unknown {
			undecided++
		}
	}
	doc.Summary = fmt.Sprintf("unknown after %d round(s): %d of %d comparison(s) undecided", ab.Rounds, undecided, len(cs))
	return string(abtest.Inconclusive), doc
}

// Line is the decision in one line: device, config, metric, change with
// its interval, p and samples.
func (d *ABDecision) Line() string {
	return fmt.Sprintf("%s %s %s %+.1f%% [%+.1f%%, %+.1f%%] (%.2f → %.2f, p %.2g, %d+%d runs)", d.DeviceID, d.ConfigKey, d.Metric,
		100*d.Change, 100*d.Low, 100*d.High, d.MeanA, d.MeanB, d.P, d.NA, d.NB)
}

func values(ss []*store.ABSample, f func(*store.ABSample) float64) []float64 {
	out := make([]float64, len(ss))
	for i, s := range ss {
		out[i] = f(s)
	}
	return out
}

func mean(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	var s float64
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

func allRunsTerminal(runs []ABRunState) bool {
	for _, r := range runs {
		if !store.TerminalState(r.State) {
			return false
		}
	}
	return true
}

func oneLine(s string) string {
	return cmp.Or(strings.Join(strings.Fields(s), " "), "no error recorded")
}
