package expert

import (
	"fmt"
	"math"
	"sort"
)

// RoutingTrace is a recorded sequence of expert demands: the experts of
// every Use call of a run, in call order. A store records one with
// Options.Record; the oracle replays it.
type RoutingTrace struct {
	Calls []TraceCall
}

// TraceCall is one Use call (a layer and the experts demanded, in the order
// the model passed them) or, with Prefetch set, one Prefetch call (the
// experts predicted for the layer).
type TraceCall struct {
	Layer    int
	Experts  []int
	Prefetch bool
}

// Len returns the number of expert demands in the trace.
func (t *RoutingTrace) Len() int {
	n := 0
	for _, c := range t.Calls {
		if !c.Prefetch {
			n += len(c.Experts)
		}
	}
	return n
}

// Oracle is Belady's optimal replacement (evict the resident expert whose
// next use is furthest away) over a recorded routing trace, and the plan for
// perfect prefetching. It implements Policy; the store advances it with
// Access in trace order. Not safe for concurrent use (the store locks).
type Oracle struct {
	seq      []Key
	callEnd  []int           // callEnd[c] = index after the last access of call c
	posOf    map[Key][]int32 // ascending positions of each key in seq
	pos      int             // index of the next access
	resident map[Key]int     // resident keys and their next use
	diverged error
}

// NewOracle returns a Belady oracle for the trace.
func NewOracle(t *RoutingTrace) *Oracle {
	o := &Oracle{posOf: map[Key][]int32{}, resident: map[Key]int{}}
	for _, c := range t.Calls {
		if c.Prefetch {
			continue
		}
		for _, e := range c.Experts {
			k := Key{int32(c.Layer), int32(e)}
			o.posOf[k] = append(o.posOf[k], int32(len(o.seq)))
			o.seq = append(o.seq, k)
		}
		o.callEnd = append(o.callEnd, len(o.seq))
	}
	return o
}

// Name implements Policy.
func (o *Oracle) Name() string { return "belady" }

// Insert implements Policy.
func (o *Oracle) Insert(k Key) { o.resident[k] = o.NextUse(k) }

// Remove implements Policy.
func (o *Oracle) Remove(k Key) { delete(o.resident, k) }

// Access implements Policy: it consumes the next demand of the trace, which
// must be k; otherwise the run diverged from the recording and Err says so.
func (o *Oracle) Access(k Key) {
	if o.diverged != nil {
		return
	}
	if o.pos >= len(o.seq) {
		o.diverged = fmt.Errorf("expert: oracle: the run demands more experts than the recorded trace holds (%d); record the trace with the same prompt and token count", len(o.seq))
		return
	}
	if o.seq[o.pos] != k {
		o.diverged = fmt.Errorf("expert: oracle: demand %d is %v but the recorded trace has %v; the routing differs from the recording", o.pos, k, o.seq[o.pos])
		return
	}
	o.pos++
	if _, ok := o.resident[k]; ok {
		o.resident[k] = o.NextUse(k)
	}
}

// Err returns why the run stopped matching the trace, or nil.
func (o *Oracle) Err() error { return o.diverged }

// NextUse returns the position of the next demand of k at or after the
// current position, or math.MaxInt when k is never demanded again.
func (o *Oracle) NextUse(k Key) int {
	ps := o.posOf[k]
	i := sort.Search(len(ps), func(i int) bool { return int(ps[i]) >= o.pos })
	if i == len(ps) {
		return math.MaxInt
	}
	return int(ps[i])
}

// Victim implements Policy: the evictable resident key used furthest in the
// future (never again beats any finite distance).
func (o *Oracle) Victim(evictable func(Key) bool) (Key, bool) {
	var best Key
	bn, found := -1, false
	for k, n := range o.resident {
		if found && (n < bn || (n == bn && !keyLess(k, best))) {
			continue
		}
		if !evictable(k) {
			continue
		}
		if !found || n > bn || (n == bn && keyLess(k, best)) {
			best, bn, found = k, n, true
		}
	}
	return best, found
}

// Simulate replays trace through policy with room for capacity experts and
// no prefetching, and returns the number of demands that missed. It is the
// cache-only model of a run, used to compare policies with the oracle.
func Simulate(t *RoutingTrace, p Policy, capacity int) (misses, total int) {
	res := map[Key]struct{}{}
	for _, c := range t.Calls {
		if c.Prefetch {
			continue
		}
		cur := map[Key]struct{}{}
		for _, e := range c.Experts {
			cur[Key{int32(c.Layer), int32(e)}] = struct{}{}
		}
		for _, e := range c.Experts {
			k := Key{int32(c.Layer), int32(e)}
			total++
			if _, ok := res[k]; !ok {
				misses++
				for len(res) >= capacity {
					v, ok := p.Victim(func(x Key) bool { _, busy := cur[x]; return !busy || len(cur) > capacity })
					if !ok {
						break
					}
					p.Remove(v)
					delete(res, v)
				}
				res[k] = struct{}{}
				p.Insert(k)
			}
			p.Access(k)
		}
	}
	return misses, total
}
