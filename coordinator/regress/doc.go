// Package regress detects performance regressions in benchmark series.
// It is pure (no I/O): coordinator/regress/monitor connects it to the
// store, ingest and webhooks.
//
// A series is keyed by SeriesKey (suite, config, metric, device model, OS
// major, runtime build lineage, emulated or real); its points are run
// results ordered by seq, each the mean of a run's repetitions with their
// stddev and count when known.
//
// Detect finds confirmed change points:
//
//	points ─► set aside isolated bad runs (isolatedOutliers)
//	       ─► candidates: PELT (default) or E-divisive means
//	       ─► confirm each boundary against its adjacent segments:
//	            t-test on repetition-weighted means (within-run
//	            variances shrunk toward the window's) with the window's
//	            residual variance, at a level that depends on the
//	            points after the boundary and on whether the series is
//	            judged once or re-tested after every result
//	            (alphaWeight); a step beyond
//	            a linear trend (drift check); Mann-Whitney; minimum
//	            effect; minimum segment length; consistent short new
//	            segment; no transient blips
//	       ─► placement: each change moved to the best split between its
//	          neighbours, with its location range (LastGoodSeq,
//	          FirstBadSeq)
//	       ─► direction from the metric (HigherIsBetter)
//
// DetectPooled is Detect with a noise level pooled from the series'
// siblings (the same metric on the same device model: other configs,
// suites, lineages; SeriesNoise, PoolNoise, pool.go), which the tests and
// the location range then use beside the window's own residual variance.
//
// It is deterministic (no permutations, no randomness) and safe for
// concurrent use. Classify scopes a change across devices (device,
// platform, global); Attribute and TestAt tell which LES metrics moved
// with a throughput change; Summarize writes the one-line summary.
//
// Evaluate is the evaluation harness: synthetic histories with planted
// steps at several noise levels and kinds, replayed result by result as
// the coordinator does, scored for recall at 2, 4 and 8 results after the
// step, detection delay and false alerts, for results with and without
// repetitions (Design). The default settings were chosen
// with it; docs/regressions.md has the measured grid. EvaluatePlaced is
// the placed-step evaluation: single results, steps anywhere, in families
// (outliers, heavy tails, bimodal noise, a step on a drift, short and long
// series, nulls and drifts without a step), judged once and scored with
// placement: a change counts only within one point of the step, further
// off it is a false alert and a miss; every rate has its Wilson bound,
// and PlacedConfig.HeldOut draws a held-out run. It also measures what
// limits settled recall on the series it scores (placed_ceiling.go):
// misses unfound or misplaced, steps not significant at their true place
// at the detector's level, and the Bayes rule's placement knowing all but
// the place (a ceiling). Each change point carries its location range
// (locate.go).
package regress
