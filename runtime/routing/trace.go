package routing

import (
	"fmt"
	"slices"
	"sort"

	"github.com/lesfarm/lesfarm/runtime/expert"
)

// FromTrace returns the token routing of a recorded trace. Demand calls
// are grouped into steps (a call to a layer at or below the previous
// call's starts a new step); a step whose every demand has at most the
// model's experts per token is one token, and the prefetch call preceding
// a layer's demand in the step is its prediction. A step of several
// positions (prefill, verify) ends the current sequence and is skipped,
// since its tokens' individual routing is not in the trace.
func FromTrace(tf *expert.TraceFile) []Sequence {
	L := len(tf.Model.Layers)
	k := tf.Model.ExpertsUsed
	var out []Sequence
	var seq Sequence
	var cur *Token
	multi, last := false, -1
	pending := make([][]int, L)
	flush := func() {
		if cur != nil {
			if multi {
				if len(seq) > 0 {
					out = append(out, seq)
				}
				seq = nil
			} else {
				seq = append(seq, *cur)
			}
		}
		cur, multi = nil, false
	}
	for _, c := range tf.Trace.Calls {
		if c.Layer < 0 || c.Layer >= L {
			continue
		}
		if c.Prefetch {
			pending[c.Layer] = c.Experts
			continue
		}
		if cur == nil || c.Layer <= last {
			flush()
			cur = &Token{Selected: make([][]int, L)}
		}
		last = c.Layer
		if k > 0 && len(c.Experts) > k {
			multi = true
		}
		cur.Selected[c.Layer] = c.Experts
		if p := pending[c.Layer]; p != nil {
			if cur.Predicted == nil {
				cur.Predicted = make([][]int, L)
			}
			cur.Predicted[c.Layer] = p
			pending[c.Layer] = nil
		}
	}
	flush()
	if len(seq) > 0 {
		out = append(out, seq)
	}
	return out
}

// ToTrace writes imported routing as a routing trace of model tm: one
// demand call per token and MoE layer (the token's experts, distinct, in
// ascending order, as the runtime passes them). The routing's MoE layers
// map in order onto tm's layers with experts. Geometry that contradicts
// tm (layer count, top-k, an expert id out of range) is an error naming
// the first bad token and layer.
func ToTrace(r *Routed, tm expert.TraceModel) (*expert.TraceFile, error) {
	var moeLayers []int
	for l, x := range tm.Layers {
		if x.Experts > 0 {
			moeLayers = append(moeLayers, l)
		}
	}
	if len(moeLayers) != r.Layers {
		return nil, fmt.Errorf("%d MoE layers, the model has %d", r.Layers, len(moeLayers))
	}
	if tm.ExpertsUsed > 0 && r.TopK != tm.ExpertsUsed {
		return nil, fmt.Errorf("top-%d, the model routes top-%d", r.TopK, tm.ExpertsUsed)
	}
	tf := &expert.TraceFile{Model: tm}
	tf.Trace.Calls = make([]expert.TraceCall, 0, len(r.Experts)*r.Layers)
	for t, tok := range r.Experts {
		for i, row := range tok {
			l := moeLayers[i]
			es := make([]int, 0, len(row))
			for _, e := range row {
				if e < 0 || e >= tm.Layers[l].Experts {
					return nil, fmt.Errorf("token %d layer %d: expert %d, the model's layer has %d", t, i, e, tm.Layers[l].Experts)
				}
				es = append(es, e)
			}
			sort.Ints(es)
			es = slices.Compact(es)
			tf.Trace.Calls = append(tf.Trace.Calls, expert.TraceCall{Layer: l, Experts: es})
		}
	}
	return tf, nil
}

// GuessModel returns a TraceModel for routing imported without a model:
// r.Layers layers of experts experts (the largest id + 1 when experts is
// 0), each of one byte (the trace then counts experts, not bytes).
func GuessModel(r *Routed, experts int) expert.TraceModel {
	if experts == 0 {
		for _, tok := range r.Experts {
			for _, row := range tok {
				for _, e := range row {
					experts = max(experts, e+1)
				}
			}
		}
	}
	tm := expert.TraceModel{Name: "imported", Arch: "imported", ExpertsUsed: r.TopK, Layers: make([]expert.TraceLayer, r.Layers)}
	for l := range tm.Layers {
		tm.Layers[l] = expert.TraceLayer{Experts: max(experts, 1), ExpertBytes: 1}
	}
	return tm
}
