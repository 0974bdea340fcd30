package expert

import (
	"fmt"
	"math"
	"sort"
)

// HorizonOracle bounds what a policy can reach with a predictor that sees
// horizon calls (layers) ahead: Belady's rule (evict the expert used
// furthest in the future) where the next use of an expert is known
// exactly only if it falls within the next horizon calls, and is otherwise
// estimated from each expert's true popularity over the whole trace (its
// demands per visit of its layer) and the layer cycle, as the nextuse
// policy estimates it online. Horizon 0 is the best a policy that knows
// how popular each expert is, but not the order of demands, can do; a
// horizon of one call is a perfect next-layer predictor; a horizon of the
// whole trace is MIN. It implements Policy for ReplayCache, which advances
// it with Access in trace order. Not safe for concurrent use.
type HorizonOracle struct {
	horizon  int
	layers   int
	seq      []Key
	callOf   []int           // call index of each demand
	callLyr  []int           // layer of each demand call
	posOf    map[Key][]int32 // ascending positions of each key in seq
	q        map[Key]float64 // demands per visit of the expert's layer
	pos      int
	nextAt   []int       // position of the next demand of the same key, or MaxInt
	resident map[Key]int // resident keys and the position of their next demand
}

// NewHorizonOracle returns the bound for tr with the given horizon in
// calls.
func NewHorizonOracle(tr *RoutingTrace, horizon int) *HorizonOracle {
	o := &HorizonOracle{horizon: horizon, posOf: map[Key][]int32{}, q: map[Key]float64{}, resident: map[Key]int{}}
	visits := map[int]int{}
	counts := map[Key]int{}
	for _, c := range tr.Calls {
		if c.Prefetch {
			continue
		}
		ci := len(o.callLyr)
		o.callLyr = append(o.callLyr, c.Layer)
		visits[c.Layer]++
		o.layers = max(o.layers, c.Layer+1)
		for _, e := range c.Experts {
			k := Key{int32(c.Layer), int32(e)}
			o.posOf[k] = append(o.posOf[k], int32(len(o.seq)))
			o.seq = append(o.seq, k)
			o.callOf = append(o.callOf, ci)
			counts[k]++
		}
	}
	for k, n := range counts {
		o.q[k] = float64(n) / float64(visits[int(k.Layer)])
	}
	o.nextAt = make([]int, len(o.seq))
	last := map[Key]int{}
	for p := len(o.seq) - 1; p >= 0; p-- {
		o.nextAt[p] = math.MaxInt
		if n, ok := last[o.seq[p]]; ok {
			o.nextAt[p] = n
		}
		last[o.seq[p]] = p
	}
	return o
}

// Name implements Policy.
func (o *HorizonOracle) Name() string {
	if o.horizon >= len(o.callLyr) {
		return "min"
	}
	return fmt.Sprintf("horizon-%d", o.horizon)
}

// Insert implements Policy.
func (o *HorizonOracle) Insert(k Key) {
	ps := o.posOf[k]
	i := sort.Search(len(ps), func(i int) bool { return int(ps[i]) >= o.pos })
	o.resident[k] = math.MaxInt
	if i < len(ps) {
		o.resident[k] = int(ps[i])
	}
}

// Remove implements Policy.
func (o *HorizonOracle) Remove(k Key) { delete(o.resident, k) }

// Access implements Policy: it consumes the next demand of the trace.
func (o *HorizonOracle) Access(k Key) {
	if o.pos >= len(o.seq) {
		return
	}
	if _, ok := o.resident[k]; ok && o.seq[o.pos] == k {
		o.resident[k] = o.nextAt[o.pos]
	}
	o.pos++
}

// distance returns k's next use in calls from the current one, exact
// within the horizon, estimated beyond it.
func (o *HorizonOracle) distance(k Key, next int) float64 {
	cur := len(o.callLyr)
	if o.pos > 0 {
		cur = o.callOf[o.pos-1]
	}
	if next < len(o.seq) {
		if d := o.callOf[next] - cur; d <= o.horizon {
			return float64(d)
		}
	} else if o.horizon >= len(o.callLyr) {
		return math.Inf(1)
	}
	q := o.q[k]
	if q <= 0 {
		return math.Inf(1)
	}
	curLayer := 0
	if cur < len(o.callLyr) {
		curLayer = o.callLyr[cur]
	}
	L := o.layers
	d := int(k.Layer) - curLayer
	if d <= 0 {
		d += L
	}
	for d <= o.horizon {
		d += L // not demanded within the horizon: its next chance is later
	}
	return float64(d) + float64(L)*(1-q)/q
}

// Victim implements Policy.
func (o *HorizonOracle) Victim(evictable func(Key) bool) (Key, bool) {
	var best Key
	bd, found := 0.0, false
	for k, next := range o.resident {
		if !evictable(k) {
			continue
		}
		d := o.distance(k, next)
		if !found || d > bd || (d == bd && keyLess(k, best)) {
			best, bd, found = k, d, true
		}
	}
	return best, found
}
