package monitor

import (
	"cmp"
	"context"
	"slices"
	"sync"

	"github.com/lesfarm/lesfarm/coordinator/regress"
	"github.com/lesfarm/lesfarm/coordinator/store"
)

// siblingNoise pools the noise of series seriesID's siblings (see
// Config.PoolSiblings), each estimated on its own window as the detector
// sees it (regress.SeriesNoise). A sibling's estimate runs the detector on
// its window, so it is computed once per window and reused until the
// window changes (siblingNoiseCache): every new point of a series would
// otherwise run the detector on all its siblings again.
func (m *Monitor) siblingNoise(ctx context.Context, seriesID int64, higher bool) (regress.NoisePrior, error) {
	if m.cfg.PoolSiblings <= 0 {
		return regress.NoisePrior{}, nil
	}
	sib, err := m.cfg.Store.RegressSiblingPoints(ctx, seriesID, m.cfg.PoolSiblings, cmp.Or(m.cfg.Detector.Window, 120))
	if err != nil {
		return regress.NoisePrior{}, err
	}
	ids := make([]int64, 0, len(sib))
	for id := range sib {
		ids = append(ids, id)
	}
	slices.Sort(ids) // the same pool, summed in the same order, every time
	est := make([]regress.NoisePrior, 0, len(sib))
	for _, id := range ids {
		est = append(est, m.noise.estimate(id, sib[id], func(ps []store.RegressPoint) regress.NoisePrior {
			return regress.SeriesNoise(toPoints(ps), higher, m.cfg.Detector)
		}))
	}
	return regress.PoolNoise(est), nil
}

// siblingNoiseCache holds each series' noise estimate with the window it
// was computed on. A sibling's metric, and so its direction, is its
// series' own, and the detector's configuration is the monitor's, so the
// window alone decides the estimate.
type siblingNoiseCache struct {
	mu sync.Mutex
	m  map[int64]noiseEntry
}

// noiseEntry is one series' estimate and its window's fingerprint.
type noiseEntry struct {
	window windowKey
	est    regress.NoisePrior
}

// windowKey tells windows apart: their length, last point, and the sums
// of their seqs and values (a point replaced or set aside anywhere in
// the window changes them).
type windowKey struct {
	n             int
	lastSeq       int64
	lastRun       string
	seqSum        int64
	valSum, sdSum float64
}

func windowKeyOf(ps []store.RegressPoint) windowKey {
	k := windowKey{n: len(ps)}
	for _, p := range ps {
		k.seqSum += p.Seq
		k.valSum += p.Value
		k.sdSum += p.Stddev + float64(p.N)
	}
	if len(ps) > 0 {
		k.lastSeq, k.lastRun = ps[len(ps)-1].Seq, ps[len(ps)-1].RunKey
	}
	return k
}

// estimate returns series id's estimate on window ps, computing it with
// compute only when ps differs from the window it was last computed on.
func (c *siblingNoiseCache) estimate(id int64, ps []store.RegressPoint, compute func([]store.RegressPoint) regress.NoisePrior) regress.NoisePrior {
	k := windowKeyOf(ps)
	c.mu.Lock()
	e, ok := c.m[id]
	c.mu.Unlock()
	if ok && e.window == k {
		return e.est
	}
	est := compute(ps)
	c.mu.Lock()
	if c.m == nil {
		c.m = map[int64]noiseEntry{}
	}
	c.m[id] = noiseEntry{window: k, est: est}
	c.mu.Unlock()
	return est
}

// toPoints converts the store's points to the detector's.
func toPoints(ps []store.RegressPoint) []regress.Point {
	out := make([]regress.Point, len(ps))
	for i, p := range ps {
		out[i] = regress.Point{Seq: p.Seq, Value: p.Value, Stddev: p.Stddev, N: p.N}
	}
	return out
}
