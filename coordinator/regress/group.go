package regress

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
)

// Scope says where a change appears.
type Scope string

// Scopes of a change point across devices.
const (
	ScopeDevice   Scope = "device"   // one device model
	ScopePlatform Scope = "platform" // several device models, all of one platform
	ScopeGlobal   Scope = "global"   // across platforms, or on every device observed
)

// Classify decides the scope of a change from the series keys where it was
// confirmed (affected) and the keys of the same suite, config, metric and
// lineage that have results after the change (observed; affected keys are
// added if missing). detail names the device model(s) or platform.
//
//   - one affected device model, while other models were observed
//     without the change (or no other model exists): device;
//   - several models, all on one platform, and some model of another
//     platform observed without it: platform;
//   - otherwise (several platforms affected, or every observed model of
//     several platforms affected): global.
func Classify(affected, observed []SeriesKey) (scope Scope, detail string) {
	models := map[string]string{} // affected model -> platform
	for _, k := range affected {
		models[k.DeviceModel] = k.Platform()
	}
	obsModels := map[string]string{}
	for _, k := range append(slices.Clone(observed), affected...) {
		obsModels[k.DeviceModel] = k.Platform()
	}
	names := sortedKeys(models)
	if len(models) == 1 {
		return ScopeDevice, names[0]
	}
	platforms := map[string]bool{}
	for _, p := range models {
		platforms[p] = true
	}
	if len(platforms) == 1 {
		var p string
		for p = range platforms {
		}
		for m, op := range obsModels {
			if op != p && models[m] == "" {
				return ScopePlatform, p
			}
		}
	}
	if len(models) == 0 {
		return ScopeDevice, ""
	}
	return ScopeGlobal, strings.Join(names, ", ")
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Attribution is one LES metric that moved at a change point.
type Attribution struct {
	Metric         string    `json:"metric"`           // base metric, e.g. predictor_recall
	Layers         string    `json:"layers,omitempty"` // "10–17" for per-layer metrics
	Before         float64   `json:"before"`
	After          float64   `json:"after"`
	RelativeChange float64   `json:"relative_change"`
	PValue         float64   `json:"p_value"`
	Direction      Direction `json:"direction"`
	Text           string    `json:"text"` // e.g. "predictor recall 0.82→0.64 in layers 10–17"
}

// AttributionAlpha is the significance level for an LES metric to count
// as having moved with a change point. It is looser than the detector's:
// the change point is already established, the question is only which
// mechanism moved with it.
const AttributionAlpha = 0.01

// Attribute reports which LES metrics moved at the change point cp of a
// series, given the points of its sibling series (same suite, config,
// device, OS, lineage; any metric, per layer or not). Each sibling is
// split at cp.Seq into the same number of points before and after as the
// change point's segments, and tested like a change point (t-test and
// Mann-Whitney at AttributionAlpha, minimum effect 2%). Per-layer series
// of one metric that moved in the same direction are merged into one
// entry with a layer range. Results are ordered by |relative change|.
func Attribute(cp ChangePoint, siblings map[string][]Point) []Attribution {
	type moved struct {
		layer int
		cp    ChangePoint
		dir   Direction
	}
	byBase := map[string][]moved{}
	for metric, pts := range siblings {
		if !IsLESMetric(metric) {
			continue
		}
		base, layer := SplitMetric(metric)
		res, ok := TestAt(pts, cp.Seq, cp.BeforeN, cp.AfterN, true, AttributionAlpha)
		if !ok {
			continue
		}
		higher := metrics[base].higherIsBetter
		byBase[base] = append(byBase[base], moved{layer, res, direction(res.RelativeChange, higher)})
	}
	var out []Attribution
	for base, ms := range byBase {
		// Keep the majority direction; per-layer entries are merged.
		var reg, imp []moved
		for _, m := range ms {
			if m.dir == Regression {
				reg = append(reg, m)
			} else {
				imp = append(imp, m)
			}
		}
		for _, group := range [][]moved{reg, imp} {
			if len(group) == 0 {
				continue
			}
			var a Attribution
			a.Metric, a.Direction = base, group[0].dir
			var layers []int
			for _, m := range group {
				a.Before += m.cp.BeforeMean / float64(len(group))
				a.After += m.cp.AfterMean / float64(len(group))
				a.PValue = math.Max(a.PValue, m.cp.PValue)
				if m.layer >= 0 {
					layers = append(layers, m.layer)
				}
			}
			if a.Before != 0 {
				a.RelativeChange = (a.After - a.Before) / math.Abs(a.Before)
			}
			a.Layers = layerRanges(layers)
			a.Text = fmt.Sprintf("%s %s→%s", metricLabel(base), fmtNum(a.Before), fmtNum(a.After))
			if a.Layers != "" {
				word := "layers"
				if len(layers) == 1 {
					word = "layer"
				}
				a.Text += " in " + word + " " + a.Layers
			}
			out = append(out, a)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		ai, aj := math.Abs(out[i].RelativeChange), math.Abs(out[j].RelativeChange)
		if ai != aj {
			return ai > aj
		}
		return out[i].Metric < out[j].Metric
	})
	return out
}

// TestAt tests whether a series changed at seq, given that a change at
// seq is already established elsewhere (another metric of the same runs,
// or another device): the points are split at seq, keeping at most
// beforeN points before and afterN from seq on (0: all), and the split is
// confirmed like a detected change point (t-test and Mann-Whitney at
// alpha, 2% minimum effect, two points a side, consistent new segment).
// The returned change point's Direction follows higherIsBetter.
func TestAt(pts []Point, seq int64, beforeN, afterN int, higherIsBetter bool, alpha float64) (ChangePoint, bool) {
	// The change is established elsewhere; the question is only whether
	// this series moved at seq, so no drift check (it needs more points
	// than a corroborating device may have).
	cfg := Config{Alpha: alpha, FixedAlpha: true, DriftAlpha: -1}.withDefaults()
	ps := slices.Clone(pts)
	slices.SortStableFunc(ps, func(a, b Point) int { return int(sign64(a.Seq - b.Seq)) })
	cut, _ := slices.BinarySearchFunc(ps, seq, func(p Point, s int64) int { return int(sign64(p.Seq - s)) })
	before, after := ps[:cut], ps[cut:]
	if beforeN > 0 && len(before) > beforeN {
		before = before[len(before)-beforeN:]
	}
	if afterN > 0 && len(after) > afterN {
		after = after[:afterN]
	}
	res, ok, _ := testSplit(before, after, cfg, noiseVar{floor: seriesNoiseVar(append(slices.Clone(before), after...))})
	if len(after) > 0 {
		res.Seq = after[0].Seq
	}
	res.Index = cut
	res.Direction = direction(res.RelativeChange, higherIsBetter)
	return res, ok
}

func sign64(x int64) int64 {
	switch {
	case x < 0:
		return -1
	case x > 0:
		return 1
	}
	return 0
}

// layerRanges formats sorted-unique layers as "3, 10–17".
func layerRanges(layers []int) string {
	if len(layers) == 0 {
		return ""
	}
	slices.Sort(layers)
	layers = slices.Compact(layers)
	var parts []string
	for i := 0; i < len(layers); {
		j := i
		for j+1 < len(layers) && layers[j+1] == layers[j]+1 {
			j++
		}
		if j > i {
			parts = append(parts, fmt.Sprintf("%d–%d", layers[i], layers[j]))
		} else {
			parts = append(parts, fmt.Sprint(layers[i]))
		}
		i = j + 1
	}
	return strings.Join(parts, ", ")
}

// fmtNum prints fractions with two decimals and larger values with three
// significant digits.
func fmtNum(x float64) string {
	if math.Abs(x) < 10 {
		return fmt.Sprintf("%.2f", x)
	}
	return fmt.Sprintf("%.3g", x)
}

// Headline formats a change point of metric on where (a device model or
// platform) as e.g. "decode −9% on phone-mid".
func Headline(metric string, cp ChangePoint, where string) string {
	s := fmt.Sprintf("%s %s%.0f%%", metricLabel(metric), signChar(cp.RelativeChange), math.Abs(100*cp.RelativeChange))
	if where != "" {
		s += " on " + where
	}
	return s
}

func signChar(x float64) string {
	if x < 0 {
		return "−"
	}
	return "+"
}

// Summarize joins a headline and its attributions: "decode −9% on
// phone-mid; predictor recall 0.82→0.64 in layers 10–17; stall fraction
// 0.12→0.31".
func Summarize(headline string, attrs []Attribution) string {
	parts := []string{headline}
	for _, a := range attrs {
		parts = append(parts, a.Text)
	}
	return strings.Join(parts, "; ")
}
