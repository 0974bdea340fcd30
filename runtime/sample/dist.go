package sample

import "math"

// Dist sets dst (len(logits) values) to the distribution Sample draws
// from: the softmax of logits/Temperature restricted to the top-k and top-p
// tokens, renormalised, zero elsewhere. For a greedy sampler it is the
// one-hot vector of Argmax. Speculative sampling uses it for the target's
// and the draft's distributions (the rejection rule keeps the target's).
func (s *Sampler) Dist(logits []float32, dst []float64) {
	clear(dst)
	if s.Greedy() || len(logits) < 2 {
		dst[Argmax(logits)] = 1
		return
	}
	c := s.topK(logits)
	mx := float64(c[0].logit)
	var sum float64
	for _, x := range c {
		p := math.Exp((float64(x.logit) - mx) / s.p.Temperature)
		dst[x.id] = p
		sum += p
	}
	for _, x := range c {
		dst[x.id] /= sum
	}
	if tp := s.p.TopP; tp > 0 && tp < 1 {
		var cum float64
		keep := len(c)
		for i, x := range c {
			cum += dst[x.id]
			if cum >= tp {
				keep = i + 1
				break
			}
		}
		for _, x := range c[keep:] {
			dst[x.id] = 0
		}
		for _, x := range c[:keep] {
			dst[x.id] /= cum
		}
	}
}

// Float64 returns a uniform value in [0, 1) from the sampler's PRNG.
func (s *Sampler) Float64() float64 { return s.rng.Float64() }

// Draw returns a token drawn from the distribution p (non-negative
// weights, not necessarily normalised), using the sampler's PRNG; the last
// token with positive weight when rounding leaves a remainder, and 0 when
// every weight is 0.
func (s *Sampler) Draw(p []float64) int {
	var sum float64
	last := 0
	for i, v := range p {
		if v > 0 {
			sum += v
			last = i
		}
	}
	if sum <= 0 {
		return 0
	}
	r := s.rng.Float64() * sum
	for i, v := range p {
		if v <= 0 {
			continue
		}
		r -= v
		if r < 0 {
			return i
		}
	}
	return last
}
