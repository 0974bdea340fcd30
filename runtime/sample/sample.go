// Package sample picks the next token from a logit vector: greedy (argmax,
// ties to the lowest id), or temperature sampling restricted by top-k and
// top-p, driven by a seeded PRNG so a seed reproduces a run exactly.
package sample

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
)

// Params configures a Sampler. The zero value is greedy decoding.
type Params struct {
	// Temperature divides the logits; 0 (or less) means greedy.
	Temperature float64
	// TopK keeps the K most likely tokens (0 = all).
	TopK int
	// TopP keeps the smallest set of most likely tokens whose probability
	// mass reaches TopP (0 or >= 1 = all).
	TopP float64
	// Seed seeds the PRNG.
	Seed uint64
}

// Validate reports a parameter out of range.
func (p Params) Validate() error {
	switch {
	case math.IsNaN(p.Temperature) || p.Temperature < 0:
		return fmt.Errorf("sample: temperature %v must be >= 0", p.Temperature)
	case p.TopK < 0:
		return fmt.Errorf("sample: top-k %d must be >= 0", p.TopK)
	case math.IsNaN(p.TopP) || p.TopP < 0 || p.TopP > 1:
		return fmt.Errorf("sample: top-p %v must be in [0, 1]", p.TopP)
	}
	return nil
}

// Sampler picks tokens. It is not safe for concurrent use.
type Sampler struct {
	p     Params
	rng   *rand.Rand
	cand  []cand
	probs []float64
}

type cand struct {
	id    int
	logit float32
}

// New returns a Sampler for p. It returns an error for invalid parameters.
func New(p Params) (*Sampler, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &Sampler{p: p, rng: rand.New(rand.NewPCG(p.Seed, p.Seed^0x9e3779b97f4a7c15))}, nil
}

// Greedy reports whether the sampler always takes the argmax.
func (s *Sampler) Greedy() bool { return s.p.Temperature <= 0 }

// Argmax returns the index of the largest logit; ties go to the lowest id.
func Argmax(logits []float32) int {
	best := 0
	for i, v := range logits {
		if v > logits[best] {
			best = i
		}
	}
	return best
}

// Sample returns the next token id for logits.
func (s *Sampler) Sample(logits []float32) int {
	if s.Greedy() || len(logits) < 2 {
		return Argmax(logits)
	}
	c := s.topK(logits)
	probs := s.probs[:0]
	mx := float64(c[0].logit)
	var sum float64
	for _, x := range c {
		p := math.Exp((float64(x.logit) - mx) / s.p.Temperature)
		probs = append(probs, p)
		sum += p
	}
	s.probs = probs
	for i := range probs {
		probs[i] /= sum
	}
	if tp := s.p.TopP; tp > 0 && tp < 1 {
		var cum float64
		for i, p := range probs {
			cum += p
			if cum >= tp {
				probs = probs[:i+1]
				c = c[:i+1]
				break
			}
		}
		sum = cum
	} else {
		sum = 1
	}
	r := s.rng.Float64() * sum
	for i, p := range probs {
		r -= p
		if r < 0 {
			return c[i].id
		}
	}
	return c[len(probs)-1].id
}

// topK returns the sampler's candidates: every token sorted by logit
// descending, ids ascending on ties (so results do not depend on the sort
// algorithm), cut to TopK when it is set. The slice is the sampler's buffer,
// valid until the next call.
func (s *Sampler) topK(logits []float32) []cand {
	c := s.cand[:0]
	for i, v := range logits {
		c = append(c, cand{i, v})
	}
	s.cand = c
	sort.Slice(c, func(i, j int) bool {
		if c[i].logit != c[j].logit {
			return c[i].logit > c[j].logit
		}
		return c[i].id < c[j].id
	})
	if k := s.p.TopK; k > 0 && k < len(c) {
		c = c[:k]
	}
	return c
}
