package model

import (
	_ "embed"
	"fmt"
	"math"
	"runtime"
	"sort"
	"strings"
	"sync"

	"github.com/lesfarm/lesfarm/runtime/tensor"
	"github.com/lesfarm/lesfarm/runtime/tokenizer"
)

// calibrationText is plain English prose, one sequence per line, written
// for this purpose (it is not routing-stats' prompt set). The
// fine-grained-moe construction routes it analytically to set each
// expert's router bias (balance).
//
//go:embed synth_calibration.txt
var calibrationText string

// Router balancing, as DeepSeek-V3's auxiliary-loss-free load balancing
// does in training: every expert's logit gets a bias, lowered while the
// expert takes more than its share of the calibration text's demands and
// raised while it takes less. The bias is a router weight on the constant
// coordinates, so it is part of the file and nothing changes at run time.
const (
	fgBalanceIters = 80   // bias updates per layer
	fgBalanceStep  = 0.15 // first update, in logit standard deviations per unit of relative excess load
)

// fgTop10 is the share of demands the most used 10% of experts take in
// the target popularity (routing-stats on the trained fixture; docs/les.md
// "Realistic routing").
const fgTop10 = 0.150

// calibration returns the calibration text tokenized with the model's own
// tokenizer, one sequence per line (sequences shorter than 2 tokens are
// dropped, longer ones cut at the model's context).
func (f *fine) calibration() ([][]int, error) {
	tokens, merges, types, err := byteBPE(f.c.Vocab, f.c.Seed)
	if err != nil {
		return nil, err
	}
	pre := "gpt-2"
	if f.c.Arch == "qwen35moe" {
		pre = "qwen35"
	}
	eos := len(tokens) - 1
	tok, err := tokenizer.New(tokenizer.Config{Model: "gpt2", Pre: pre, Tokens: tokens, Types: types, Merges: merges, BOS: eos, EOS: eos})
	if err != nil {
		return nil, err
	}
	var seqs [][]int
	for _, line := range strings.Split(calibrationText, "\n") {
		ids := tok.Tokenize(strings.TrimSpace(line), false, false)
		if len(ids) >= 2 {
			seqs = append(seqs, ids[:min(len(ids), f.c.Context)])
		}
	}
	return seqs, nil
}

// embedRow returns the block(s) of token row's embedding that hold the
// routing subspace as the file stores them (routingBlock, quantized and
// dequantized with the embedding's type) and the row's RMS, with the
// columns after those blocks at their expected square.
func (f *fine) embedRow(row int) (v []float32, rms float64) {
	H := f.c.Hidden
	n := H
	switch f.embType {
	case tensor.Q4_K:
		n = 256
	case tensor.Q8_0:
		n = (2*f.R + fgBias + 31) / 32 * 32
	}
	n = min(n, H)
	v = make([]float32, n)
	if err := tensor.Dequantize(f.embType, encodeBlock(f.embType, f.routingBlock(row, n), f.embType == tensor.Q4_K), v); err != nil {
		panic(err) // whole blocks by construction
	}
	var sq float64
	for _, x := range v {
		sq += float64(x) * float64(x)
	}
	sq += float64(H - n)
	return v, math.Sqrt(sq / float64(H))
}

// routeInputs returns the routing coordinates of every calibration token
// as layers ≥ 1 see them before their RMSNorm (which scales all of a
// token's logits alike, so top-k does not depend on it): the token part
// [0, R) and the context part [R, 2R) that layer 0's mixer writes, 2R
// values per token, sequences concatenated. kconst is the constant
// coordinates' mean stored value, ks each token's mean over kconst (its
// embedding's constants quantize with their block): an expert's bias b
// adds b·ks to the token's logit. The expert outputs' small writes into
// the routing coordinates are left out.
func (f *fine) routeInputs(seqs [][]int) (z, ks []float32, kconst float64) {
	R := f.R
	rows := map[int][]float32{}
	rmss := map[int]float64{}
	for _, s := range seqs {
		for _, id := range s {
			if _, ok := rows[id]; !ok {
				rows[id], rmss[id] = f.embedRow(id)
			}
		}
	}
	for _, v := range rows {
		for _, x := range v[2*R : 2*R+fgBias] {
			kconst += float64(x) / fgBias / float64(len(rows))
		}
	}
	for _, s := range seqs {
		var fast, slow ctxHead
		for _, id := range s {
			v, rms := rows[id], rmss[id]
			zt := make([]float32, 2*R)
			copy(zt, v[:R])
			if f.c.Arch == "qwen35moe" {
				f.deltaNetStep(&fast, &slow, zt, v, rms)
			} else {
				// Softmax weights decay^Δ over the positions so far.
				gain := math.Sqrt((1 + f.decay) / (1 - f.decay))
				fast.average(v[:R], rms, f.decay)
				slow.average(v[:R], rms, fgSlow)
				for r := range R {
					zt[R+r] = float32(gain * (fast.y[r]/fast.w - slow.y[r]/slow.w))
				}
			}
			z = append(z, zt...)
			var k float64
			for _, x := range v[2*R : 2*R+fgBias] {
				k += float64(x) / fgBias
			}
			ks = append(ks, float32(k/kconst))
		}
	}
	return z, ks, kconst
}

// ctxHead is one context head's state in routeInputs: y the (weighted)
// sum of its inputs, w the sum of the weights.
type ctxHead struct {
	y []float64
	w float64
}

// average adds the normalised token part x/rms with weight 1 after
// multiplying the old sum by decay.
func (h *ctxHead) average(x []float32, rms, decay float64) {
	if h.y == nil {
		h.y = make([]float64, len(x))
	}
	h.w = h.w*decay + 1
	for r, v := range x {
		h.y[r] = h.y[r]*decay + float64(v)/rms
	}
}

// deltaNet advances a DeltaNet context head by one token: its readouts
// (silu(+x̃) and silu(−x̃) per token coordinate) move by beta towards the
// token's; it returns the head's RMS over the head dim D.
func (h *ctxHead) deltaNet(x []float32, rms, beta float64, D int) float64 {
	if h.y == nil {
		h.y = make([]float64, 2*len(x))
	}
	var sq float64
	for r, v := range x {
		x := float64(v) / rms
		h.y[2*r] += beta * (float64(silu(float32(x))) - h.y[2*r])
		h.y[2*r+1] += beta * (float64(silu(float32(-x))) - h.y[2*r+1])
		sq += h.y[2*r]*h.y[2*r] + h.y[2*r+1]*h.y[2*r+1]
	}
	return math.Sqrt(sq/float64(D)) + 1e-12
}

// deltaNetStep advances qwen35moe's two layer-0 context heads by one token
// and writes the context part (fast less slow, each after its gated
// RMSNorm) into zt[R:2R].
func (f *fine) deltaNetStep(fast, slow *ctxHead, zt, v []float32, rms float64) {
	R, D := f.R, f.c.Qwen35.SSMState
	beta := func(b float64) float64 {
		return 1 / (1 + math.Exp(-math.Log(b/(1-b))*f.rmsE/rms))
	}
	nf := fast.deltaNet(v[:R], rms, beta(1-f.decay), D)
	ns := slow.deltaNet(v[:R], rms, beta(1-fgSlow), D)
	gate := float64(silu(float32(fgGateZ * f.rmsE / rms)))
	gain := fgDNGain * math.Sqrt(2*float64(R)/float64(D))
	for r := range R {
		zt[R+r] = float32(gain * gate * ((fast.y[2*r]-fast.y[2*r+1])/nf - (slow.y[2*r]-slow.y[2*r+1])/ns))
	}
}

// balance sets f.biases: per layer, the logit bias of each expert that
// evens out its share of the calibration text's demands.
func (f *fine) balance() error {
	seqs, err := f.calibration()
	if err != nil {
		return err
	}
	z, ks, kconst := f.routeInputs(seqs)
	f.kconst = kconst
	f.biases = make([][]float32, f.c.Layers)
	var wg sync.WaitGroup
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	for l := range f.c.Layers {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			f.biases[l] = balanceLayer(f.logits(l, z), ks, f.c.ExpertsUsed, f.popularity(l))
		}()
	}
	wg.Wait()
	return nil
}

// logits returns layer l's router logits (without bias) of the routing
// inputs z, tokens × experts.
func (f *fine) logits(l int, z []float32) []float32 {
	R2, E := 2*f.R, f.c.Experts
	w := f.routers[l]
	n := len(z) / R2
	out := make([]float32, n*E)
	for t := range n {
		zt := z[t*R2 : (t+1)*R2]
		for e := range E {
			var s float32
			for i, x := range w[e*R2 : (e+1)*R2] {
				s += x * zt[i]
			}
			out[t*E+e] = s
		}
	}
	return out
}

// popularity returns layer l's target demand profile: each expert's
// share of demands relative to even use (mean 1), log-normal with the
// spread whose top 10% of experts take fgTop10 of the demands, in a
// layer-specific random order.
func (f *fine) popularity(l int) []float64 {
	E := f.c.Experts
	g := newRNG(f.c.Seed, fmt.Sprintf("popularity/%d", l))
	z := make([]float64, E)
	for e := range z {
		z[e] = g.normal()
	}
	profile := func(sigma float64) []float64 {
		p := make([]float64, E)
		var sum float64
		for e, x := range z {
			p[e] = math.Exp(sigma * x)
			sum += p[e]
		}
		for e := range p {
			p[e] *= float64(E) / sum
		}
		return p
	}
	top := func(p []float64) float64 {
		s := append([]float64(nil), p...)
		sort.Sort(sort.Reverse(sort.Float64Slice(s)))
		var t float64
		for _, x := range s[:max(1, E/10)] {
			t += x
		}
		return t / float64(E)
	}
	lo, hi := 0.0, 3.0
	for range 40 {
		if mid := (lo + hi) / 2; top(profile(mid)) < fgTop10 {
			lo = mid
		} else {
			hi = mid
		}
	}
	return profile(lo)
}

// balanceLayer returns the experts' biases that bring each expert's share
// of the top-k demands of the logits (tokens × experts; token t adds
// bias·ks[t]) to its target (relative to even use).
func balanceLayer(logits, ks []float32, k int, target []float64) []float32 {
	n, E := len(ks), len(target)
	var s, ss float64
	for _, x := range logits {
		s += float64(x)
		ss += float64(x) * float64(x)
	}
	mean := s / float64(len(logits))
	sigma := math.Sqrt(max(ss/float64(len(logits))-mean*mean, 1e-12))
	bias := make([]float32, E)
	load := make([]int, E)
	row := make([]float32, E)
	idx := make([]int, k)
	share := float64(n*k) / float64(E)
	for it := range fgBalanceIters {
		clear(load)
		for t := range n {
			for e, x := range logits[t*E : (t+1)*E] {
				row[e] = x + bias[e]*ks[t]
			}
			topK(row, idx)
			for _, e := range idx {
				load[e]++
			}
		}
		step := fgBalanceStep * sigma * (1 - float64(it)/fgBalanceIters)
		for e := range bias {
			want := share * target[e]
			bias[e] -= float32(step * math.Tanh((float64(load[e])-want)/want))
		}
	}
	return bias
}
