// Package abtest decides whether two builds measured side by side differ,
// as Chromium's Pinpoint does: two two-sample tests, a minimum effect size
// and an "add repetitions" answer when the data cannot yet tell.
//
// It is pure arithmetic over float64 samples: no I/O, no runtime kernels
// (the coordinator imports it and must not link runtime/tensor or
// runtime/expert), safe for concurrent use.
//
// # Samples
//
// A sample is one run's value of a metric for one config (the mean over
// that run's measured repetitions). Side A is the baseline build, side B
// the build under test; both are measured on the same device, interleaved
// (see the coordinator's A/B gate, docs/ab.md).
//
// # Decision (Compare)
//
//   - p = min(KS p, Mann–Whitney U p). Mann–Whitney is blind to a change
//     of spread; Kolmogorov–Smirnov is weak on discrete data. Both are
//     exact for small samples (KS by a lattice-path recursion, MWU by the
//     Gaussian binomial coefficients when there are no ties) and
//     asymptotic otherwise (MWU with the tie-corrected variance).
//   - p ≤ Alpha (0.01) and the Hodges–Lehmann change at least MinEffect
//     (default 2%): Different. p ≤ Alpha with a smaller change: Same (real
//     but below the minimum effect anyone acts on, as Perfherder's).
//   - p above SameThreshold(n, m, MinEffect/CV): Same. The threshold is the
//     p-value that a true change of exactly MinEffect would exceed only
//     with probability Beta (1%), from the Mann–Whitney power under a
//     normal shift (asymptotic relative efficiency 3/π); it falls as the
//     sample grows and as the minimum effect grows against the noise.
//     While a true MinEffect change could still plausibly hide in the
//     data the threshold is 1 and nothing is called Same.
//   - otherwise Unknown: the caller adds repetitions (Plan) up to its
//     budget.
//
// The change and its confidence interval are the Hodges–Lehmann shift of
// log values (the median of all pairwise log ratios b/a) with the
// distribution-free interval from the Mann–Whitney distribution, reported
// as relative changes (exp(x)−1).
package abtest
