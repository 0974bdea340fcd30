package routing

import "math"

// Target is one statistic a routing preset aims at, with its source.
type Target struct {
	Name   string  // the Metrics field, as routing-stats prints it
	Value  float64 // the target
	Source string
}

// FineGrainedTargets are the fine-grained-moe preset's targets (lesfarm
// synth --routing fine-grained-moe; docs/les.md, "Realistic routing"). A
// model meets one when its overall metric is within ±10% of Value, and the
// lookahead recall must also be at least 0.9.
var FineGrainedTargets = []Target{
	{"recall", 0.97, "Fate (arXiv 2502.12224): next-layer prediction ~97% on Qwen1.5-MoE and DeepSeekMoE"},
	{"reuse", 0.38, "Cohere: 38% of experts overlap from one decode step to the next"},
	{"verify×4", 2.5, "Cohere: verifying 4 draft tokens loads ~2.5× one token's unique experts"},
	{"reuse@8", 0.695, "routing-stats on the trained fixture (tiny-moe-kjv-f16, validation.txt)"},
	{"entropy", 0.986, "routing-stats on the trained fixture"},
	{"top10%", 0.150, "routing-stats on the trained fixture"},
}

// Of returns the metric of m that t names (NaN for an unknown name).
func (t Target) Of(m Metrics) float64 {
	switch t.Name {
	case "recall":
		return m.Recall
	case "reuse":
		return m.Reuse
	case "verify×4":
		return m.VerifyMultiple
	case "reuse@8":
		return m.ReuseWindow
	case "entropy":
		return m.Entropy
	case "top10%":
		return m.Top10Share
	}
	return math.NaN()
}

// Met reports whether v is within ±10% of t (and, for recall, ≥ 0.9).
func (t Target) Met(v float64) bool {
	ok := v >= 0.9*t.Value && v <= 1.1*t.Value
	if t.Name == "recall" {
		ok = ok && v >= 0.9
	}
	return ok
}
