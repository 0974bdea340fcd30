package regress

import (
	"math"
	"math/rand/v2"
)

// A farm runs many phones of one model, and each model's series come in
// families: the same metric for every config of a suite and every
// lineage, measured by the same phones. Their run-to-run noise is the
// phones' noise, so the detector pools it (DetectPooled). The placed
// evaluation draws those siblings beside every series it scores, as a
// fleet produces them:
//
//   - PlacedConfig.Siblings series of the same family (noise law, drift
//     kind) and length, measured on the same builds;
//   - each at a CV a little off the scored series' (configs of one model
//     differ: the CV times exp(SiblingSpread·N(0,1)));
//   - half of them with a step of their own (a size of the grid, random
//     sign, anywhere with MinBefore points before and 2 after): a change
//     that moves one config often moves others, at other builds too.
//
// Each sibling's noise is estimated as the monitor does (SeriesNoise:
// detection on the sibling alone, residual variance around its confirmed
// segments) and pooled (PoolNoise). Siblings are drawn from their own
// random stream, so the scored series are the same with and without them.

// siblingPrior draws cfg.Siblings sibling series of a series of family f
// with n points at CV cv and pools their noise estimates.
func siblingPrior(rng *rand.Rand, cfg PlacedConfig, f Family, n int, cv float64, det Config) NoisePrior {
	if cfg.Siblings <= 0 {
		return NoisePrior{}
	}
	est := make([]NoisePrior, 0, cfg.Siblings)
	sf := f
	sf.Step = false
	for range cfg.Siblings {
		scv := cv * math.Exp(cfg.SiblingSpread*rng.NormFloat64())
		after, step := 0, 0.0
		if before := min(cfg.MinBefore, n/2); rng.IntN(2) == 0 && n-before >= 2 {
			after = 2 + rng.IntN(n-before-1)
			step = cfg.Steps[rng.IntN(len(cfg.Steps))]
		}
		pts, _, _ := placedSeries(rng, sf, n, after, step, scv)
		est = append(est, SeriesNoise(pts, true, det))
	}
	return PoolNoise(est)
}
