package model

import (
	_ "embed"
	"fmt"
	"math"
	"strings"

	"github.com/lesfarm/lesfarm/runtime/tensor"
	"github.com/lesfarm/lesfarm/runtime/tokenizer"
)

// calibrationText is plain English prose, one sequence per line, written
// for this purpose (it is not routing-stats' prompt set). The synthetic
// tokenizer learns its first merges from it (vocabulary), and
// fine-grained-moe's layer 0 routes it to set each expert's router bias
// (balance).
//
//go:embed synth_calibration.txt
var calibrationText string

// balanceText is more English, one sequence per line, in registers the
// calibration text lacks or has little of (scripture, technical text with
// numbers, options and code spans, figures, letters, law), also written for
// this purpose. Layer 0's balancing routes it with the calibration text:
// how often a text demands each of layer 0's experts follows its token
// frequencies, and 3.9 kB of one register estimated them too roughly (on a
// long text of scripture and technical prose, layer 0's top-10% share was
// 0.18 balanced on the calibration text alone, 0.15 with this text). The
// tokenizer does not learn merges from it: longer word pieces recur less
// within 8 tokens, and reuse@8 fell by 0.016 when it did.
//
//go:embed synth_balance.txt
var balanceText string

// Router balancing, as DeepSeek-V3's auxiliary-loss-free load balancing
// does in training: every expert's logit gets a bias, lowered while the
// expert takes more than its share of the calibration text's demands and
// raised while it takes less, until the experts are evenly used. The bias
// is a router weight on the constant coordinates, so it is part of the
// file and nothing changes at run time. Only layer 0 is balanced: it
// routes on the token alone, so how often a text demands each of its
// experts follows the text's token frequencies, which English texts
// share. The later layers route on the context, whose uneven spread
// follows the text itself; biases that even out the calibration text's
// 45 demands per expert fitted its noise and raised the top-10% share on
// other text (docs/les.md, "Realistic routing"), so those layers have
// none and their routers give every expert the same logit spread
// (routerWeights) instead.
const (
	fgBalanceIters = 40   // bias updates
	fgBalanceStep  = 0.15 // first update, in logit standard deviations per unit of relative excess load
)

// calibration returns the calibration and balance texts tokenized with
// the model's own vocabulary voc, one sequence per line (sequences shorter
// than 2 tokens are dropped, longer ones cut at the model's context).
func (f *fine) calibration(voc synthVocab) ([][]int, error) {
	eos := len(voc.tokens) - 1
	tok, err := tokenizer.New(tokenizer.Config{Model: "gpt2", Pre: f.c.pretokenizer(), Tokens: voc.tokens, Types: voc.types, Merges: voc.merges, BOS: eos, EOS: eos})
	if err != nil {
		return nil, err
	}
	var seqs [][]int
	for _, line := range strings.Split(calibrationText+"\n"+balanceText, "\n") {
		ids := tok.Tokenize(strings.TrimSpace(line), false, false)
		if len(ids) >= 2 {
			seqs = append(seqs, ids[:min(len(ids), f.c.Context)])
		}
	}
	return seqs, nil
}

// embedRow returns the block(s) of token row's embedding that hold the
// routing subspace as the file stores them (routingBlock, quantized and
// dequantized with the embedding's type).
func (f *fine) embedRow(row int) []float32 {
	H := f.c.Hidden
	n := H
	switch f.embType {
	case tensor.Q4_K:
		n = 256
	case tensor.Q8_0:
		n = (2*f.R + fgBias + 31) / 32 * 32
	}
	n = min(n, H)
	v := make([]float32, n)
	if err := tensor.Dequantize(f.embType, encodeBlock(f.embType, f.routingBlock(row, n), f.embType == tensor.Q4_K), v); err != nil {
		panic(err) // whole blocks by construction
	}
	return v
}

// routerWeights returns layer l's router on the routing subspace,
// experts × 2R: row e reads the token part (layer 0) or a layer-specific
// random mix of token and context parts, each part of every row scaled to
// the same norm.
func (f *fine) routerWeights(l int) []float32 {
	g := newRNG(f.c.Seed, fmt.Sprintf("routing/%d", l))
	R := f.R
	share := 0.0
	if l > 0 {
		share = f.ctxShare()
	}
	wt, wc := math.Sqrt(1-share), math.Sqrt(share)
	n := fgLogit / math.Sqrt(float64(R))
	w := make([]float32, f.c.Experts*2*R)
	for e := range f.c.Experts {
		row := w[e*2*R : (e+1)*2*R]
		for i := range R {
			row[i] = float32(g.normal())
			row[R+i] = float32(g.normal())
		}
		// Every expert's logit gets the same spread: a longer row is
		// picked more often, by as much as the text's context varies,
		// which no bias set on one text evens out on another.
		for part, s := range []float64{wt, wc} {
			p := row[part*R : (part+1)*R]
			var sq float64
			for _, x := range p {
				sq += float64(float64(x) * float64(x))
			}
			k := n * s * math.Sqrt(float64(R)/sq)
			for i := range p {
				p[i] = float32(k * float64(p[i]))
			}
		}
	}
	return w
}

// router returns the vals of layer l's router: row e is routerWeights' row
// on the routing subspace and the expert's bias spread over the constant
// coordinates.
func (f *fine) router(l int) func(row, col0 int, v []float32, _ func() float64) bool {
	R := f.R
	return func(r, col0 int, v []float32, _ func() float64) bool {
		clear(v) // an F32 row comes in one call
		w := f.routers[l][r*2*R : (r+1)*2*R]
		b := float32(float64(f.biases[l][r]) / (fgBias * f.kconst))
		for i := range v {
			switch col := col0 + i; {
			case col < 2*R:
				v[i] = w[col]
			case col < 2*R+fgBias:
				v[i] = b
			}
		}
		return true
	}
}

// tokenInputs returns the token part [0, R) of the embedding, as the file
// stores it, of every distinct token of the calibration text (in order of
// first use), R values per token, and how often each occurs: what layer
// 0's router reads before its RMSNorm (which scales all of a token's
// logits alike, so top-k does not depend on it), and that is all it reads,
// so a token's demands are the same wherever it occurs. kconst is the
// constant coordinates' mean stored value, ks each token's mean over
// kconst (its embedding's constants quantize with their block): an
// expert's bias b adds b·ks to the token's logit.
func (f *fine) tokenInputs(seqs [][]int) (z, ks, count []float32, kconst float64) {
	R := f.R
	at := map[int]int{}
	var rows [][]float32
	for _, s := range seqs {
		for _, id := range s {
			i, ok := at[id]
			if !ok {
				i = len(rows)
				at[id] = i
				rows = append(rows, f.embedRow(id))
				count = append(count, 0)
			}
			count[i]++
		}
	}
	for _, v := range rows {
		for _, x := range v[2*R : 2*R+fgBias] {
			kconst += float64(x) / fgBias / float64(len(rows))
		}
	}
	for _, v := range rows {
		z = append(z, v[:R]...)
		var k float64
		for _, x := range v[2*R : 2*R+fgBias] {
			k += float64(float64(x) / fgBias)
		}
		ks = append(ks, float32(k/kconst))
	}
	return z, ks, count, kconst
}

// balance sets f.biases: layer 0's logit bias of each expert that evens
// out its share of the calibration text's demands, and no bias on the
// later layers (see the balancing constants above).
func (f *fine) balance(voc synthVocab) error {
	seqs, err := f.calibration(voc)
	if err != nil {
		return err
	}
	z, ks, count, kconst := f.tokenInputs(seqs)
	f.kconst = kconst
	f.biases = make([][]float32, f.c.Layers)
	for l := range f.biases {
		f.biases[l] = make([]float32, f.c.Experts)
	}
	f.biases[0] = balanceLayer(f.tokenLogits(0, z), ks, count, f.c.ExpertsUsed)
	return nil
}

// tokenLogits returns layer l's router logits (without bias) of the token
// parts z (R values per token; the router's context weights are not
// read), tokens × experts.
func (f *fine) tokenLogits(l int, z []float32) []float32 {
	R, E := f.R, f.c.Experts
	w := f.routers[l]
	n := len(z) / R
	out := make([]float32, n*E)
	for t := range n {
		zt := z[t*R : (t+1)*R]
		for e := range E {
			var s float32
			for i, x := range w[e*2*R : e*2*R+R] {
				s += float32(x * zt[i])
			}
			out[t*E+e] = s
		}
	}
	return out
}

// balanceLayer returns the experts' biases that bring each expert's share
// of the top-k demands of the logits (tokens × experts; token t occurs
// count[t] times and adds bias·ks[t]) to an even share.
func balanceLayer(logits, ks, count []float32, k int) []float32 {
	n := len(ks)
	E := len(logits) / n
	var s, ss, total float64
	for t := range n {
		w := float64(count[t])
		for _, x := range logits[t*E : (t+1)*E] {
			s += float64(w * float64(x))
			ss += float64(w * float64(x) * float64(x))
		}
		total += w
	}
	mean := s / (total * float64(E))
	sigma := math.Sqrt(max(ss/(total*float64(E))-float64(mean*mean), 1e-12))
	bias := make([]float32, E)
	load := make([]float64, E)
	row := make([]float32, E)
	idx := make([]int, k)
	want := total * float64(k) / float64(E)
	for it := range fgBalanceIters {
		clear(load)
		for t := range n {
			for e, x := range logits[t*E : (t+1)*E] {
				row[e] = x + float32(bias[e]*ks[t])
			}
			topK(row, idx)
			for _, e := range idx {
				load[e] += float64(count[t])
			}
		}
		step := fgBalanceStep * sigma * (1 - float64(it)/fgBalanceIters)
		for e := range bias {
			bias[e] -= float32(step * math.Tanh((load[e]-want)/want))
		}
	}
	return bias
}
