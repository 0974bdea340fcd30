package regress

import (
	"fmt"
	"math"
	"slices"
)

// Localization: where exactly a confirmed change starts, and how sure
// that is.
//
// PELT places its boundaries jointly with the others it proposes; once
// confirmation has dropped some of them (a blip, a staircase step, a weak
// boundary), the survivors sit where they were best among boundaries that
// no longer exist. relocate moves each surviving boundary to the split
// that fits its two adjacent segments best (least squares, the maximum
// likelihood place of one mean shift), and locationRange gives the
// credible range of that place: the posterior of the split under flat
// priors, p(τ) ∝ (n₁·n₂)^(-1/2)·exp(−RSS(τ)/2σ²), the smallest run of
// splits around the best one that holds LocationMass of it.

// LocationMass is the posterior mass of a change point's location range
// (ChangePoint.LastGoodSeq, FirstBadSeq).
const LocationMass = 0.95

// splitRSS returns the residual sum of squares of pts[lo:hi] cut into two
// segments at every split t (lo+m ≤ t ≤ hi−m), indexed t−lo; +Inf where
// the split is not allowed (segments shorter than m, or a cut inside a
// seq shared by reruns).
func splitRSS(pts []Point, lo, hi, m int) []float64 {
	n := hi - lo
	out := make([]float64, n+1)
	s1 := make([]float64, n+1)
	s2 := make([]float64, n+1)
	for i := range n {
		x := pts[lo+i].Value
		s1[i+1], s2[i+1] = s1[i]+x, s2[i]+float64(x*x)
	}
	seg := func(a, b int) float64 {
		d := s1[b] - s1[a]
		return s2[b] - s2[a] - d*d/float64(b-a)
	}
	for k := range out {
		t := lo + k
		if k < m || n-k < m || (t > 0 && t < len(pts) && pts[t-1].Seq == pts[t].Seq) {
			out[k] = math.Inf(1)
			continue
		}
		out[k] = seg(0, k) + seg(k, n)
	}
	return out
}

// relocate moves every boundary of b (sorted indices into pts) to the
// best split of the points between its neighbouring boundaries, in order,
// each move seeing the ones before it. It reports whether any moved.
func relocate(pts []Point, b []int, m int) bool {
	moved := false
	for i := range b {
		lo, hi := 0, len(pts)
		if i > 0 {
			lo = b[i-1]
		}
		if i+1 < len(b) {
			hi = b[i+1]
		}
		rss := splitRSS(pts, lo, hi, m)
		best := b[i] - lo
		for k, r := range rss {
			if r < rss[best] {
				best = k
			}
		}
		if at := lo + best; at != b[i] {
			b[i], moved = at, true
		}
	}
	return moved
}

// locationRange returns the credible range [first, last] of the index of
// the first new point of the change at b[i]: the smallest contiguous run
// of splits around b[i] holding LocationMass of the split's posterior
// between the neighbouring boundaries, with noise variance s2; and near,
// the posterior mass within one point of b[i]. With s2 ≤ 0 the range is
// the boundary alone (near 1).
func locationRange(pts []Point, b []int, i, m int, s2 float64) (first, last int, near float64) {
	at := b[i]
	if s2 <= 0 {
		return at, at, 1
	}
	lo, hi := 0, len(pts)
	if i > 0 {
		lo = b[i-1]
	}
	if i+1 < len(b) {
		hi = b[i+1]
	}
	k0 := at - lo
	w, total := splitPosterior(pts, lo, hi, m, s2)
	if k0 < 0 || k0 >= len(w) || w[k0] == 0 || !(total > 0) {
		return at, at, 1
	}
	for k := max(k0-1, 0); k <= min(k0+1, len(w)-1); k++ {
		near += w[k]
	}
	near /= total
	a, z := k0, k0
	mass := w[k0]
	for mass < LocationMass*total {
		// Grow toward the heavier neighbour.
		left, right := -1.0, -1.0
		if a > 0 {
			left = w[a-1]
		}
		if z+1 < len(w) {
			right = w[z+1]
		}
		if left < 0 && right < 0 {
			break
		}
		if left >= right {
			a--
			mass += left
		} else {
			z++
			mass += right
		}
	}
	// Zero-weight splits at the edges (not allowed) add nothing.
	for a < k0 && w[a] == 0 {
		a++
	}
	for z > k0 && w[z] == 0 {
		z--
	}
	return lo + a, lo + z, near
}

// splitPosterior returns the unnormalised posterior of the split of
// pts[lo:hi] into two mean levels, indexed t−lo, under flat priors and
// noise variance s2: (n₁·n₂)^(−½)·exp(−RSS(t)/2·s2), 0 where the split is
// not allowed; and its total.
func splitPosterior(pts []Point, lo, hi, m int, s2 float64) ([]float64, float64) {
	rss := splitRSS(pts, lo, hi, m)
	n := hi - lo
	best := math.Inf(1)
	for _, r := range rss {
		best = math.Min(best, r)
	}
	w := make([]float64, len(rss))
	total := 0.0
	for k, r := range rss {
		if math.IsInf(r, 1) {
			continue
		}
		w[k] = math.Exp(-(r-best)/(2*s2)) / math.Sqrt(float64(k*(n-k)))
		total += w[k]
	}
	return w, total
}

// refine moves every boundary of b to the split that has the most
// posterior mass within one point of it (the splits before, at and
// after), between its neighbouring boundaries, rather than the single
// most likely split: a change is placed right when it is within one
// build, and where the posterior is flat the best window is not always
// centred on the peak. It reports whether any moved.
func refine(pts []Point, b []int, m int, s2 float64) bool {
	if s2 <= 0 {
		return false
	}
	moved := false
	for i := range b {
		lo, hi := 0, len(pts)
		if i > 0 {
			lo = b[i-1]
		}
		if i+1 < len(b) {
			hi = b[i+1]
		}
		w, total := splitPosterior(pts, lo, hi, m, s2)
		if !(total > 0) {
			continue
		}
		win := func(k int) float64 {
			if k < 0 || k >= len(w) || w[k] == 0 {
				return -1
			}
			s := w[k]
			if k > 0 {
				s += w[k-1]
			}
			if k+1 < len(w) {
				s += w[k+1]
			}
			return s
		}
		best := b[i] - lo
		for k := range w {
			if win(k) > win(best)*(1+1e-9) {
				best = k
			}
		}
		if at := lo + best; at != b[i] {
			b[i], moved = at, true
		}
	}
	return moved
}

// place finishes confirm once every boundary of b passes: each boundary
// moves to the best split between its neighbours when the change still
// passes there (dropped boundaries may have left it where it fitted them;
// which changes exist is decided before, so placement never adds or
// removes one), gets its direction and its location range, and a change
// whose location is too uncertain (cfg.MinLocationMass) is withheld.
func place(pts []Point, b []int, res []ChangePoint, higherIsBetter bool, cfg Config, nv noiseVar) []ChangePoint {
	moved := slices.Clone(b)
	r1 := relocate(pts, moved, cfg.MinSegment)
	r2 := refine(pts, moved, cfg.MinSegment, nv.global)
	if r1 || r2 {
		nv2 := nv
		nv2.global, nv2.df = segmentedVar(pts, moved)
		for i := range b {
			if moved[i] == b[i] {
				continue
			}
			lo, hi := 0, len(pts)
			if i > 0 {
				lo = b[i-1]
			}
			if i+1 < len(b) {
				hi = b[i+1]
			}
			if cp, ok, _ := testSplit(pts[lo:moved[i]], pts[moved[i]:hi], cfg, nv2); ok {
				cp.Index, cp.Seq = moved[i], pts[moved[i]].Seq
				res[i], b[i] = cp, moved[i]
			}
		}
	}
	out := res[:0]
	for i := range res {
		res[i].Direction = direction(res[i].RelativeChange, higherIsBetter)
		first, last, near := locationRange(pts, b, i, cfg.MinSegment, nv.global)
		res[i].rangeFirst, res[i].rangeLast = first, last
		if near < cfg.MinLocationMass {
			continue
		}
		out = append(out, res[i])
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// RangeString formats the location range as "after 41, by 43": the change
// happened after point LastGoodSeq and its first point is at or before
// FirstBadSeq ("by 43" alone when the range reaches the first point).
func (cp ChangePoint) RangeString() string {
	if cp.LastGoodIndex < 0 {
		return fmt.Sprintf("by %d", cp.FirstBadSeq)
	}
	return fmt.Sprintf("after %d, by %d", cp.LastGoodSeq, cp.FirstBadSeq)
}
