package expert

// prefetchGate decides whether a predicted expert is worth prefetching.
// A prefetch of an expert that the layer then demands saves a demanded
// read (its stall); one that is not demanded costs its read, and, when the
// cache is full, the expert it evicts, which misses later with the
// probability q that it is demanded at its layer's next visit. Counting
// all three in reads, a prediction of rank r for layer l is worth its
// bytes when p > (1 − p) + q, i.e. p > (1 + q) / 2, where p is the
// measured precision of rank r's predictions for layer l. It learns p
// from every prediction (prefetched or not) against the demand that
// follows, and q from each expert's demands per visit of its layer. It has
// no goroutines and no lock: the store calls it with its lock held.
type prefetchGate struct {
	seen, hit [][]float64 // per layer, per rank
	visits    []float64   // per layer: Use calls
	demands   map[Key]float64
	prior     func(rank int) float64
}

// gatePriorWeight is how many observations the prior precision counts as.
const gatePriorWeight = 4

func newPrefetchGate(layers, predictK int) *prefetchGate {
	return &prefetchGate{
		seen: make([][]float64, layers), hit: make([][]float64, layers),
		visits: make([]float64, layers), demands: map[Key]float64{},
		// Until measured: the ranks within predictK are assumed right as
		// often as the predictor's measured top ranks (docs/les.md), the
		// rest as often wrong as right.
		prior: func(rank int) float64 {
			if rank < predictK {
				return 0.9
			}
			return 0.5
		},
	}
}

// observe records a layer's ranked predictions against its demand.
func (g *prefetchGate) observe(layer int, predicted, demanded []int) {
	for len(g.seen[layer]) < len(predicted) {
		g.seen[layer] = append(g.seen[layer], 0)
		g.hit[layer] = append(g.hit[layer], 0)
	}
	for r, x := range predicted {
		g.seen[layer][r]++
		for _, y := range demanded {
			if x == y {
				g.hit[layer][r]++
				break
			}
		}
	}
}

// demand records a Use of layer.
func (g *prefetchGate) demand(layer int, experts []int) {
	g.visits[layer]++
	for _, e := range experts {
		g.demands[Key{int32(layer), int32(e)}]++
	}
}

// precision returns the measured precision of rank's predictions for
// layer, smoothed towards the prior.
func (g *prefetchGate) precision(layer, rank int) float64 {
	var seen, hit float64
	if rank < len(g.seen[layer]) {
		seen, hit = g.seen[layer][rank], g.hit[layer][rank]
	}
	return (hit + float64(gatePriorWeight*g.prior(rank))) / (seen + gatePriorWeight)
}

// reuse returns the probability that k is demanded at its layer's next
// visit: its demands per visit so far.
func (g *prefetchGate) reuse(k Key) float64 {
	v := g.visits[k.Layer]
	if v == 0 {
		return 0
	}
	return min(1, g.demands[k]/v)
}

// worth reports whether a prediction of rank for layer pays for its read
// when it evicts an expert demanded at its next visit with probability q
// (0 when the cache has room).
func (g *prefetchGate) worth(layer, rank int, q float64) bool {
	return g.precision(layer, rank) > (1+q)/2
}
