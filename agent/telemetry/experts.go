package telemetry

import (
	"slices"

	"github.com/lesfarm/lesfarm/protocol"
	"github.com/lesfarm/lesfarm/runtime/trace"
)

// Defaults of the per-expert counts.
const (
	// DefaultExpertEvery is how many measured decode steps the expert
	// counts cover before a batch carries them.
	DefaultExpertEvery = 1024
	// expertEntriesCut makes a batch carry the counts early when they hold
	// this many (expert, count) entries, well below
	// protocol.MaxExpertEntries.
	expertEntriesCut = protocol.MaxExpertEntries / 4
)

// expertCounts accumulates per-(config, layer, expert) demand and miss
// counts over measured decode steps. The step in progress is held apart
// (step) until its TokenEvent says whether it was measured decode.
type expertCounts struct {
	// step holds the selected and missed experts of each layer of the step
	// in progress (copied: trace events' slices are only valid during the
	// call); stepLayers lists the layers that reported.
	stepSel, stepMiss [][]int
	stepLayers        []int

	rows    map[int][]*expertRow // by config, then layer (nil: none yet)
	entries int                  // nonzero experts over all rows
	steps   int                  // measured decode steps counted since the last cut
	due     bool                 // the next cut carries the counts
}

type expertRow struct {
	steps        int
	demand, miss []int32 // by expert id
}

// layer records the experts of one layer of the step in progress.
func (x *expertCounts) layer(ev *trace.LayerEvent) {
	if len(ev.Selected) == 0 {
		return // a dense layer, or a store that reports nothing
	}
	for len(x.stepSel) <= ev.Layer {
		x.stepSel = append(x.stepSel, nil)
		x.stepMiss = append(x.stepMiss, nil)
	}
	if len(x.stepSel[ev.Layer]) == 0 {
		x.stepLayers = append(x.stepLayers, ev.Layer)
	}
	x.stepSel[ev.Layer] = append(x.stepSel[ev.Layer][:0], ev.Selected...)
	x.stepMiss[ev.Layer] = append(x.stepMiss[ev.Layer][:0], ev.Missed...)
}

// token closes the step in progress: its experts are counted when it was
// a measured decode step (repetition >= 0, phase decode, the steps the
// per-layer table counts), and dropped otherwise. It returns true when the
// next batch should carry the counts.
func (x *expertCounts) token(cfg, rep int, phase trace.Phase, every int) bool {
	if rep >= 0 && phase == trace.Decode && len(x.stepLayers) > 0 {
		if x.rows == nil {
			x.rows = map[int][]*expertRow{}
		}
		byLayer := x.rows[cfg]
		for _, l := range x.stepLayers {
			for len(byLayer) <= l {
				byLayer = append(byLayer, nil)
			}
			r := byLayer[l]
			if r == nil {
				r = &expertRow{}
				byLayer[l] = r
			}
			r.steps++
			for _, e := range x.stepSel[l] {
				if e < 0 || e >= protocol.MaxExpertsPerLayer {
					continue
				}
				for len(r.demand) <= e {
					r.demand = append(r.demand, 0)
					r.miss = append(r.miss, 0)
				}
				if r.demand[e] == 0 {
					x.entries++
				}
				r.demand[e]++
			}
			for _, e := range x.stepMiss[l] {
				if e >= 0 && e < len(r.miss) && r.demand[e] > r.miss[e] {
					r.miss[e]++
				}
			}
		}
		x.rows[cfg] = byLayer
		x.steps++
		if x.steps >= every || x.entries >= expertEntriesCut {
			x.due = true
		}
	}
	for _, l := range x.stepLayers {
		x.stepSel[l], x.stepMiss[l] = x.stepSel[l][:0], x.stepMiss[l][:0]
	}
	x.stepLayers = x.stepLayers[:0]
	return x.due
}

// pending reports whether there are counts to send.
func (x *expertCounts) pending() bool { return x.entries > 0 }

// take returns the counts as sparse rows sorted by (config, layer) and
// resets them.
func (x *expertCounts) take() []protocol.ExpertLoad {
	x.due = false
	if x.entries == 0 {
		return nil
	}
	cfgs := make([]int, 0, len(x.rows))
	for c := range x.rows {
		cfgs = append(cfgs, c)
	}
	slices.Sort(cfgs)
	var out []protocol.ExpertLoad
	for _, c := range cfgs {
		for l, r := range x.rows[c] {
			if row, ok := r.take(c, l); ok {
				out = append(out, row)
			}
		}
	}
	clear(x.rows)
	x.entries, x.steps = 0, 0
	return out
}

// take returns the row's nonzero experts as a sparse row (false when it
// has none).
func (r *expertRow) take(cfg, layer int) (protocol.ExpertLoad, bool) {
	if r == nil {
		return protocol.ExpertLoad{}, false
	}
	n := 0
	for _, d := range r.demand {
		if d > 0 {
			n++
		}
	}
	if n == 0 {
		return protocol.ExpertLoad{}, false
	}
	arr := make([]int32, 3*n)
	ids, dem, mis := arr[:0:n], arr[n:n:2*n], arr[2*n:2*n]
	for e, d := range r.demand {
		if d > 0 {
			ids, dem, mis = append(ids, int32(e)), append(dem, d), append(mis, r.miss[e])
		}
	}
	return protocol.ExpertLoad{ConfigIndex: cfg, Layer: layer, Steps: r.steps, Experts: ids, Demand: dem, Miss: mis}, true
}
