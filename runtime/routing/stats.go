// Package routing measures how a Mixture-of-Experts model routes: expert
// popularity, token-to-token reuse, reuse within a window, the lookahead
// predictor's precision and recall, and the unique experts of a verify
// batch. It is the one definition of these metrics; lesfarm routing-stats
// (from a model or from a trace) and bench compute them here.
//
// The input is a set of sequences of routed tokens. A Token holds, per
// layer, the experts the router chose for one position (Selected) and,
// when the lookahead predictor ran, the experts it predicted for that
// layer before the layer's input was known (Predicted). Reuse never
// crosses a sequence boundary.
package routing

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
)

// Token is the routing of one position: Selected[l] is the set of experts
// layer l used (nil for a layer without experts), Predicted[l] the set the
// lookahead predictor prefetched for layer l (nil when it did not run).
type Token struct {
	Selected  [][]int
	Predicted [][]int
}

// Sequence is the routing of consecutive positions of one text.
type Sequence []Token

// Window is the reuse window of Stats.ReuseWindow, in tokens.
const Window = 8

// VerifyK is the verify batch size of Stats.VerifyMultiple, in tokens
// (four drafted tokens, as Cohere's measurement).
const VerifyK = 4

// Metrics are one layer's statistics, or their mean over layers.
type Metrics struct {
	// Entropy is the entropy of expert popularity (the share of demands
	// each expert took, over all tokens) divided by log(experts): 1 for
	// perfectly even use.
	Entropy float64 `json:"entropy"`
	// EffectiveExperts is exp(entropy) in nats: the number of equally used
	// experts with the same entropy.
	EffectiveExperts float64 `json:"effective_experts"`
	// Top10Share is the share of demands taken by the most used 10% of
	// experts (at least one): 0.1 for even use.
	Top10Share float64 `json:"top10_share"`
	// Top10HeldOut is the top-10% share ranked on one half of the tokens
	// and read on the other (popularity.go): free of Top10Share's
	// finite-sample excess. NaN (null in JSON) below PopularityBlock+1
	// tokens.
	Top10HeldOut float64 `json:"top10_heldout"`
	// Top10Even is the top-10% share that routing with no preferred expert
	// and the same locality reads on the same tokens (popularity.go): the
	// part of Top10Share that the text's length alone explains.
	Top10Even float64 `json:"top10_even"`
	// Reuse is the mean over tokens (after each sequence's first) of
	// |S(t) ∩ S(t−1)| / |S(t)|: the share of a token's experts the previous
	// token also used.
	Reuse float64 `json:"reuse"`
	// ReuseWindow is the mean over tokens of the share of S(t) used by any
	// of the previous Window tokens of the same sequence (tokens with at
	// least one predecessor).
	ReuseWindow float64 `json:"reuse_window"`
	// Precision and Recall are the lookahead predictor's, summed over
	// tokens: |P ∩ S| / |P| and |P ∩ S| / |S|. NaN (null in JSON) when no
	// prediction was recorded.
	Precision float64 `json:"precision"`
	Recall    float64 `json:"recall"`
	// VerifyMultiple is the mean over non-overlapping VerifyK-token windows
	// of |S(t) ∪ … ∪ S(t+VerifyK−1)| / mean |S|: the unique experts a
	// VerifyK-token verify batch loads, as a multiple of one token's.
	VerifyMultiple float64 `json:"verify_multiple"`
	// Tokens is the number of tokens the layer was measured on.
	Tokens int `json:"tokens"`
}

// Stats is the report of Compute: per layer and overall (the mean over the
// layers with experts).
type Stats struct {
	Layers   []Metrics `json:"layers"`
	Overall  Metrics   `json:"overall"`
	Experts  int       `json:"experts"`
	TopK     int       `json:"top_k"`
	Tokens   int       `json:"tokens"`
	Sequence int       `json:"sequences"`
	// Convergence is the popularity on the text's first tokens
	// (Converge), when asked for (routing-stats --converge).
	Convergence []Point `json:"convergence,omitempty"`
}

// Compute returns the statistics of seqs for a model with experts experts
// per layer and layers layers. Tokens naming an expert outside [0,
// experts) or a layer beyond layers give an error.
func Compute(seqs []Sequence, layers, experts int) (*Stats, error) {
	if layers < 1 || experts < 1 {
		return nil, fmt.Errorf("routing: need at least one layer and one expert (have %d and %d)", layers, experts)
	}
	st := &Stats{Layers: make([]Metrics, layers), Experts: experts, Sequence: len(seqs)}
	for _, s := range seqs {
		st.Tokens += len(s)
		for i, t := range s {
			if len(t.Selected) > layers {
				return nil, fmt.Errorf("routing: token %d has %d layers, the model %d", i, len(t.Selected), layers)
			}
			for l, sel := range t.Selected {
				for _, e := range append(append([]int(nil), sel...), at(t.Predicted, l)...) {
					if e < 0 || e >= experts {
						return nil, fmt.Errorf("routing: token %d layer %d names expert %d of %d", i, l, e, experts)
					}
				}
				st.TopK = max(st.TopK, len(sel))
			}
		}
	}
	var n int
	for l := range layers {
		m, ok := layerMetrics(seqs, l, experts)
		st.Layers[l] = m
		if !ok {
			continue
		}
		n++
		o := &st.Overall
		o.Entropy += m.Entropy
		o.EffectiveExperts += m.EffectiveExperts
		o.Top10Share += m.Top10Share
		o.Top10HeldOut += m.Top10HeldOut
		o.Top10Even += m.Top10Even
		o.Reuse += m.Reuse
		o.ReuseWindow += m.ReuseWindow
		o.Precision += m.Precision
		o.Recall += m.Recall
		o.VerifyMultiple += m.VerifyMultiple
		o.Tokens = max(o.Tokens, m.Tokens)
	}
	if n == 0 {
		return nil, fmt.Errorf("routing: no layer routed any token")
	}
	o := &st.Overall
	for _, p := range []*float64{&o.Entropy, &o.EffectiveExperts, &o.Top10Share, &o.Top10HeldOut, &o.Top10Even, &o.Reuse, &o.ReuseWindow, &o.Precision, &o.Recall, &o.VerifyMultiple} {
		*p /= float64(n)
	}
	return st, nil
}

func at(x [][]int, l int) []int {
	if l < len(x) {
		return x[l]
	}
	return nil
}

// layerMetrics computes layer l's Metrics; ok is false when no token used
// an expert there.
func layerMetrics(seqs []Sequence, l, experts int) (m Metrics, ok bool) {
	var demands int64
	var order [][]int // the layer's demands in text order
	var reuse, reuseW, verify, selSum float64
	var reuseN, reuseWN, verifyN, selN int
	var hit, predN, selP int64
	for _, s := range seqs {
		for i, t := range s {
			sel := at(t.Selected, l)
			if len(sel) == 0 {
				continue
			}
			m.Tokens++
			selSum += float64(len(sel))
			selN++
			order = append(order, sel)
			demands += int64(len(sel))
			if i > 0 {
				reuse += float64(overlap(sel, at(s[i-1].Selected, l))) / float64(len(sel))
				reuseN++
				var win []int
				for j := max(0, i-Window); j < i; j++ {
					win = append(win, at(s[j].Selected, l)...)
				}
				reuseW += float64(overlap(sel, win)) / float64(len(sel))
				reuseWN++
			}
			if t.Predicted != nil {
				p := at(t.Predicted, l)
				hit += int64(overlap(p, sel))
				predN += int64(len(p))
				selP += int64(len(sel))
			}
		}
		for i := 0; i+VerifyK <= len(s); i += VerifyK {
			var u []int
			for _, t := range s[i : i+VerifyK] {
				u = append(u, at(t.Selected, l)...)
			}
			if len(u) > 0 {
				verify += float64(len(distinct(u)))
				verifyN++
			}
		}
	}
	if demands == 0 {
		return m, false
	}
	popularityOf(&m, order, experts, l)
	m.Reuse = ratio(reuse, reuseN)
	m.ReuseWindow = ratio(reuseW, reuseWN)
	m.Precision, m.Recall = math.NaN(), math.NaN()
	if selP > 0 {
		m.Precision = float64(hit) / float64(max(predN, 1))
		m.Recall = float64(hit) / float64(selP)
	}
	m.VerifyMultiple = ratio(verify, verifyN) / (selSum / float64(selN))
	return m, true
}

// popularity returns the normalised entropy, exp(entropy) and the top-10%
// share of demand counts.
func popularity(counts []int64) (entropy, effective, top10 float64) {
	var total int64
	for _, c := range counts {
		total += c
	}
	var h float64
	for _, c := range counts {
		if c > 0 {
			p := float64(c) / float64(total)
			h -= float64(p * math.Log(p))
		}
	}
	s := append([]int64(nil), counts...)
	sort.Slice(s, func(i, j int) bool { return s[i] > s[j] })
	var top int64
	for _, c := range s[:max(1, len(s)/10)] {
		top += c
	}
	entropy = 1
	if len(counts) > 1 {
		entropy = h / math.Log(float64(len(counts)))
	}
	return entropy, math.Exp(h), float64(top) / float64(total)
}

func ratio(sum float64, n int) float64 {
	if n == 0 {
		return math.NaN()
	}
	return sum / float64(n)
}

// overlap returns how many distinct members of a are in b.
func overlap(a, b []int) int {
	n := 0
	for _, x := range distinct(a) {
		for _, y := range b {
			if x == y {
				n++
				break
			}
		}
	}
	return n
}

func distinct(a []int) []int {
	out := make([]int, 0, len(a))
	for _, x := range a {
		dup := false
		for _, y := range out {
			dup = dup || x == y
		}
		if !dup {
			out = append(out, x)
		}
	}
	return out
}

// MarshalJSON writes NaN metrics (no data) as null.
func (m Metrics) MarshalJSON() ([]byte, error) {
	type plain Metrics
	b, err := json.Marshal(struct {
		plain
		Precision *float64 `json:"precision"`
		Recall    *float64 `json:"recall"`
		Reuse     *float64 `json:"reuse"`
		Window    *float64 `json:"reuse_window"`
		Verify    *float64 `json:"verify_multiple"`
		HeldOut   *float64 `json:"top10_heldout"`
	}{plain(m), num(m.Precision), num(m.Recall), num(m.Reuse), num(m.ReuseWindow), num(m.VerifyMultiple), num(m.Top10HeldOut)})
	return b, err
}

func num(x float64) *float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return nil
	}
	return &x
}
