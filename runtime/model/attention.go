package model

import (
	"math"
	"sync"

	"github.com/lesfarm/lesfarm/runtime/tensor"
)

// attention computes causal GQA attention for the n new positions into
// sc.att, reading keys and values from the cache. Large batches (prefill)
// split the (position, KV head) pairs over the model's threads.
func (s *State) attention(li, n int) {
	m := s.m
	group := m.Heads / m.KVHeads
	work := n * m.Heads * (s.pos + n) * m.HeadDim
	if m.threads < 2 || work < 1<<18 {
		s.sc.scores = grow(s.sc.scores, group*s.max)
		s.attendRange(li, 0, n*m.KVHeads, s.sc.scores)
		return
	}
	T := m.threads
	if len(s.sc.scoresPar) < T {
		s.sc.scoresPar = make([][]float32, T)
	}
	var wg sync.WaitGroup
	pairs := n * m.KVHeads
	for w := range T {
		lo, hi := pairs*w/T, pairs*(w+1)/T
		s.sc.scoresPar[w] = grow(s.sc.scoresPar[w], group*s.max)
		buf := s.sc.scoresPar[w]
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.attendRange(li, lo, hi, buf)
		}()
	}
	wg.Wait()
}

// attendRange computes the (position, KV head) pairs [lo, hi), pair
// i*KVHeads+kvh: the group of query heads sharing KV head kvh is scored
// against each cached key in one pass (tensor.DotRows, bit-identical to a
// Dot per head and key), then each head's softmax, then the weighted sum of
// the values for the whole group (tensor.AxpyRows, Axpy's order per head).
// scoresBuf holds group × (positions) scores.
func (s *State) attendRange(li, lo, hi int, scoresBuf []float32) {
	m := s.m
	sc := &s.sc
	D, Dv := m.HeadDim, m.ValueDim
	qDim, kvDim, vDim := m.Heads*D, m.KVHeads*D, m.KVHeads*Dv
	group := m.Heads / m.KVHeads
	scale := float32(1 / math.Sqrt(float64(D)))
	kc, vc := s.k[li], s.v[li]
	for pair := lo; pair < hi; pair++ {
		i, kvh := pair/m.KVHeads, pair%m.KVHeads
		p := s.pos + i
		cnt := p + 1
		scores := scoresBuf[:group*cnt]
		q := sc.q[i*qDim+kvh*group*D : i*qDim+(kvh+1)*group*D]
		tensor.DotRows(scores, cnt, kc[kvh*D:p*kvDim+(kvh+1)*D], kvDim, cnt, D, q, group)
		for g := range group {
			row := scores[g*cnt : (g+1)*cnt]
			for j := range row {
				row[j] *= scale
			}
			softmax(row)
		}
		out := sc.att[i*m.Heads*Dv+kvh*group*Dv : i*m.Heads*Dv+(kvh+1)*group*Dv]
		clear(out)
		tensor.AxpyRows(out, scores, cnt, vc[kvh*Dv:p*vDim+(kvh+1)*Dv], vDim, cnt, Dv, group)
	}
}
