package routing

import "github.com/lesfarm/lesfarm/runtime/expert"

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
