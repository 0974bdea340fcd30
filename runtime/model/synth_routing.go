package model

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"

	"github.com/lesfarm/lesfarm/runtime/tensor"
)

// Routing presets of SynthConfig.Routing.
const (
	// RoutingUniform is plain random weights: routing spreads evenly and
	// changes from token to token (the worst case for caching).
	RoutingUniform = "uniform"
	// RoutingFineGrained builds the weights so that the model's own
	// forward pass routes like a trained fine-grained MoE (docs/les.md,
	// "Realistic routing").
	RoutingFineGrained = "fine-grained-moe"
)

// SynthRoutingKey is the GGUF key naming a synthesized model's routing
// preset; only non-uniform presets write it.
const SynthRoutingKey = "lesfarm.synth.routing"

// RoutingPresets lists the routing presets WriteSynthetic knows.
var RoutingPresets = []string{RoutingUniform, RoutingFineGrained}

// The fine-grained-moe construction. A few hidden coordinates form the
// routing subspace, and every router reads only those:
//
//	[0, R)        the token part: the embedding's own random values
//	[R, 2R)       the context part: a fast moving average (fgDecay) of the
//	              token parts of the text so far less a slow one (fgSlow),
//	              written by layer 0's mixer (qwen3moe: two attention heads
//	              whose RoPE phases make their scores fall linearly with
//	              distance; qwen35moe: two Gated DeltaNet heads with a
//	              constant key, so their states are the averages); zero in
//	              the embedding
//	[2R, 2R+bias) a constant in every embedding row, the source of those
//	              heads' constant query and key and of each expert's
//	              router bias
//
// No other mixer writes to [0, 2R+bias) (those output rows are zero) and
// the routed experts write to [0, 2R) only with a small relative scale
// fgEps, so layer l+1's router sees almost the same routing coordinates on
// layer l's post-attention residual (the lookahead predictor's input) as on
// its own input: recall is high because the routing directions survive
// the layers, not because anything overrides routing. Layer 0 routes on
// the token part alone (its predictor sees only the embedding); layer
// l ≥ 1 routes on a layer-specific random mix of token and context
// directions with a share ctxShare of the context, which sets
// token-to-token reuse. Subtracting the slow average removes the text's
// mean token from the context, which would otherwise pin the experts
// aligned with it; every router row has the same norm, so no expert's
// logit spreads wider than another's; layer 0's router biases (balance,
// synth_calibrate.go) even out its experts' use on English token
// frequencies. The tokenizer learns its first merges from English
// (vocabulary), so no token is more than a few percent of a text. The
// constants were tuned with lesfarm routing-stats against the targets in
// docs/les.md.
const (
	fgBias    = 16   // constant coordinates
	fgDecay   = 0.95 // fast context average's factor per token
	fgDecay3  = 0.95 // qwen3moe's fast context factor (ctxShare)
	fgSlow    = 0.99 // slow context average's factor per token
	fgEps     = 0.1  // routed experts' output scale into the routing coordinates
	fgLogit   = 2.5  // router logit scale
	fgGateZ   = 4.0  // DeltaNet output gate pre-activation (silu(4) ≈ 3.9)
	fgDNGain  = 0.22 // DeltaNet context output gain at 2R = head width
	fgRopeMax = 1e-4 // largest RoPE frequency of the context head's pair
)

// ctxShare is the share of the context in the routers of layers ≥ 1:
// qwen35moe's DeltaNet context (each head RMS-normalised) varies more
// slowly than qwen3moe's attention averages at the same factors, so
// qwen3moe's routers take a little more of the token part. (With the
// learnt merges a token covers more text and the context moves more per
// token than with random merges: the shares went up from 0.99 and 0.985,
// and qwen3moe's fast average slowed to fgDecay3, to keep reuse@8 in
// its band. Then qwen35moe's fast average slowed to 0.95 as well, which
// raises reuse@8 against reuse, and the routed experts' writes into the
// routing coordinates halved (fgEps 0.2 → 0.1; recall 0.93 → 0.96),
// which raises both, so the shares became 0.9935 and 0.988: on the
// 35B-A3B-scaled preset's built-in prompts reuse 0.414 → 0.415 and
// reuse@8 0.623 → 0.631, inside their bands.)
func (f *fine) ctxShare() float64 {
	if f.c.Arch == "qwen35moe" {
		return 0.9935
	}
	return 0.988
}

// routingDims returns R, the width of the token and of the context part.
func (c *SynthConfig) routingDims() int {
	r := min(32, c.Hidden/4)
	if c.Arch == "qwen35moe" {
		r = min(r, c.SSMState/2)
	} else {
		r = min(r, c.HeadDim)
	}
	return r
}

func (c *SynthConfig) validateRouting() error {
	switch c.Routing {
	case "", RoutingUniform:
		return nil
	case RoutingFineGrained:
	default:
		return fmt.Errorf("synth: routing preset %q is unknown (have %s)", c.Routing, strings.Join(RoutingPresets, ", "))
	}
	R := c.routingDims()
	switch {
	case c.Arch == "qwen3":
		return fmt.Errorf("synth: routing %s needs a MoE architecture (qwen3moe or qwen35moe), not dense qwen3", c.Routing)
	case R < 8:
		return fmt.Errorf("synth: routing %s needs hidden >= 32 and %s >= 16 (routing subspace of 8+ coordinates)", c.Routing, map[bool]string{true: "ssm-state", false: "head dim"}[c.Arch == "qwen35moe"])
	case 2*R+fgBias > c.Hidden:
		return fmt.Errorf("synth: routing %s needs hidden >= %d", c.Routing, 2*R+fgBias)
	case c.Arch == "qwen3moe" && (c.Heads < 2 || c.HeadDim < 8):
		return fmt.Errorf("synth: routing %s needs at least 2 heads and head dim >= 8 (fast and slow context heads)", c.Routing)
	case c.Arch == "qwen35moe" && c.Qwen35.SSMHeads < 2:
		return fmt.Errorf("synth: routing %s needs at least 2 DeltaNet v-heads (fast and slow context heads)", c.Routing)
	case c.Arch == "qwen35moe" && IsFullAttention(0, c.FullAttnInterval):
		return fmt.Errorf("synth: routing %s needs layer 0 to be Gated DeltaNet (full-attn-interval >= 2)", c.Routing)
	}
	return nil
}

// fine holds the construction's derived sizes.
type fine struct {
	c       *SynthConfig
	R       int
	bias    float32 // value of the constant coordinates
	rmsE    float64 // RMS of an embedding row
	decay   float64
	embType tensor.Type
	routers [][]float32 // per layer, experts × 2R router weights on the routing subspace
	biases  [][]float32 // per layer, each expert's logit bias (balance; zero after layer 0)
	kconst  float64     // the constant coordinates' stored value
}

// fineGrained attaches the fine-grained-moe structure to the tensors ts
// (see the comment on the constants above).
func (c *SynthConfig) fineGrained(ts []synthTensor, voc synthVocab) error {
	f := &fine{c: c, R: c.routingDims(), decay: fgDecay}
	if c.Arch == "qwen3moe" {
		f.decay = fgDecay3
	}
	f.bias = float32(math.Sqrt(float64(c.Hidden) / (4 * fgBias)))
	f.rmsE = math.Sqrt(1 + fgBias*float64(f.bias*f.bias)/float64(c.Hidden))
	for _, t := range ts {
		if t.name == "token_embd.weight" {
			f.embType = t.typ
		}
	}
	f.routers = make([][]float32, c.Layers)
	for l := range c.Layers {
		f.routers[l] = f.routerWeights(l)
	}
	if err := f.balance(voc); err != nil {
		return err
	}
	for i := range ts {
		t := &ts[i]
		name := t.name
		if name == "token_embd.weight" {
			t.vals, t.fastQ4K = f.embedding, true
			continue
		}
		var l int
		var rest string
		if _, err := fmt.Sscanf(name, "blk.%d.", &l); err != nil || l >= c.Layers {
			continue
		}
		rest = name[len(fmt.Sprintf("blk.%d.", l)):]
		switch rest {
		case "attn_norm.weight", "ffn_norm.weight", "post_attention_norm.weight":
			t.vals = f.unitNorm
		case "ffn_gate_inp.weight":
			t.vals = f.router(l)
		case "ffn_down_exps.weight":
			H := c.Hidden
			t.rowStd = func(r int) float64 { return f.protect(r%H, fgEps) }
		case "ffn_down_shexp.weight":
			t.rowStd = func(r int) float64 { return f.protect(r, 0) }
		case "attn_output.weight", "ssm_out.weight":
			t.rowStd = func(r int) float64 { return f.protect(r, 0) }
		}
		if l == 0 {
			f.contextMixer(t, rest)
		}
	}
	return nil
}

// protect is the std scale of output row r: s inside [0, 2R), 0 on the
// constant coordinates, else 1.
func (f *fine) protect(r int, s float64) float64 {
	switch {
	case r < 2*f.R:
		return s
	case r < 2*f.R+fgBias:
		return 0
	}
	return 1
}

// unitNorm fills a norm vector: 1 on the routing subspace and the constant
// coordinates (so the router sees them unscaled), random elsewhere.
func (f *fine) unitNorm(_, _ int, v []float32, rnd func() float64) bool {
	for i := range v {
		v[i] = float32(rnd())
		if i < 2*f.R+fgBias {
			v[i] = 1
		}
	}
	return true
}

// routingBlock returns the first n values of embedding row row: the token
// part (standard normal), the zero context part, the constant coordinates,
// then standard normal values. It depends on the row alone, so the
// calibration (balance) sees exactly the values the file stores.
func (f *fine) routingBlock(row, n int) []float32 {
	g := &rng{s: (f.c.Seed+1)*0x9e3779b97f4a7c15 ^ (uint64(row)+1)*0xbf58476d1ce4e5b9}
	for range 4 {
		g.next()
	}
	v := make([]float32, n)
	for col := range v {
		switch R := f.R; {
		case col >= R && col < 2*R:
		case col >= 2*R && col < 2*R+fgBias:
			v[col] = f.bias
		default:
			v[col] = float32(g.normal())
		}
	}
	return v
}

// embedding fills the blocks of an embedding row that hold the routing
// subspace (routingBlock).
func (f *fine) embedding(row, col0 int, v []float32, _ func() float64) bool {
	if col0 >= 2*f.R+fgBias {
		return false
	}
	copy(v, f.routingBlock(row, col0+len(v))[col0:])
	return true
}

// biasRow fills v (columns col0..) with w on the constant coordinates and
// zero elsewhere: a row whose output is a constant.
func (f *fine) biasRow(v []float32, col0 int, w float32) {
	for i := range v {
		v[i] = 0
		if col := col0 + i; col >= 2*f.R && col < 2*f.R+fgBias {
			v[i] = w
		}
	}
}

// unit fills v (columns col0..) with w at column at and zero elsewhere.
func unit(v []float32, col0, at int, w float32) {
	for i := range v {
		v[i] = 0
		if col0+i == at {
			v[i] = w
		}
	}
}

// contextMixer makes layer 0's mixer write the context part: the fast
// moving average (factor f.decay) of the token parts less the slow one
// (fgSlow), so the context carries what the recent text has that the text
// as a whole does not, and no fixed direction (the text's mean token)
// pins a few experts.
func (f *fine) contextMixer(t *synthTensor, rest string) {
	if f.c.Arch == "qwen35moe" {
		f.deltaNetContext(t, rest)
		return
	}
	c, R := f.c, f.R
	D := c.HeadDim
	// Head 0 (fast) and head 1 (slow) read kv-head 0 (and kv-head 1, the
	// same, when each kv-head has one head) and use two rotary pairs: q on a pair's second element and k on its
	// first give scores −A·sin(θΔ) ≈ −A·θ·Δ at distance Δ, so the softmax
	// weights fall as decay^Δ (normalised over the positions so far). The
	// fast pair has the largest frequency ≤ fgRopeMax and 1/context; the
	// slow pair is the next lower one. The key has both pairs, so its
	// RMSNorm leaves each at sqrt(D/2).
	scale := math.Pow(float64(c.ropeBase()), -2/float64(D))
	theta, p := 1.0, 0
	for p < D/2-2 && theta > min(fgRopeMax, 1/float64(c.Context)) {
		theta *= scale
		p++
	}
	ps := p + 1
	weight := func(decay, theta float64) float32 {
		return float32(math.Sqrt(-math.Log(decay) / (math.Sqrt(float64(D)/2) * theta)))
	}
	w, ws := weight(f.decay, theta), weight(fgSlow, theta*scale)
	const slowHead = 1
	kvHeads := 1 + 1/(c.Heads/c.KVHeads) // kv-heads the two read: 1, or 2 without grouping
	switch rest {
	case "attn_q.weight":
		t.vals = func(r, col0 int, v []float32, _ func() float64) bool {
			if r >= 2*D {
				return false
			}
			if r == p+D/2 || r == slowHead*D+ps+D/2 {
				f.biasRow(v, col0, 1/float32(fgBias))
			} else {
				clear(v)
			}
			return true
		}
	case "attn_k.weight":
		t.vals = func(r, col0 int, v []float32, _ func() float64) bool {
			if r >= kvHeads*D {
				return false
			}
			if r%D == p || r%D == ps {
				f.biasRow(v, col0, 1/float32(fgBias))
			} else {
				clear(v)
			}
			return true
		}
	case "attn_v.weight":
		t.vals = func(r, col0 int, v []float32, _ func() float64) bool {
			if r >= kvHeads*D {
				return false
			}
			unit(v, col0, map[bool]int{true: r % D, false: -1}[r%D < R], 1)
			return true
		}
	case "attn_q_norm.weight", "attn_k_norm.weight":
		off := 0
		if rest == "attn_q_norm.weight" {
			off = D / 2
		}
		t.vals = func(_, _ int, v []float32, rnd func() float64) bool {
			for i := range v {
				v[i] = float32(rnd())
			}
			v[p+off], v[ps+off] = w, ws
			return true
		}
	case "attn_output.weight":
		gain := float32(math.Sqrt((1 + f.decay) / (1 - f.decay)))
		t.rowStd = nil
		t.vals = func(r, col0 int, v []float32, _ func() float64) bool {
			switch {
			case r < R:
				clear(v)
			case r < 2*R:
				clear(v)
				for j := range v {
					switch col0 + j {
					case r - R: // head 0, dim r-R
						v[j] = gain
					case slowHead*D + r - R:
						v[j] = -gain
					}
				}
			case r < 2*R+fgBias:
				clear(v)
			default:
				return false
			}
			return true
		}
	}
}

// deltaNetContext makes v-heads 0 (fast) and 1 (slow) of qwen35moe's
// layer 0 moving averages of the token part: q and k of their k-heads are
// constant unit vectors (from the constant coordinates), so each state's
// readout Sᵀk follows Sᵀk ← (1−β)·Sᵀk + β·v with the decay at 1 (β =
// 1−f.decay and 1−fgSlow); v holds each token coordinate twice, as
// silu(+x) and silu(−x), whose difference is x. ssm_out writes the fast
// head's differences less the slow head's.
func (f *fine) deltaNetContext(t *synthTensor, rest string) {
	c, R := f.c, f.R
	q := c.Qwen35
	D, key := q.SSMState, q.SSMGroups*q.SSMState
	kh1 := 1 % q.SSMGroups // v-head 1's k-head
	inRange := func(r, lo int) bool { return r >= lo && r < lo+D }
	inHeads := func(r, lo int) bool { return inRange(r, lo) || inRange(r, lo+kh1*D) }
	logit := func(beta float64) float64 { return math.Log(beta/(1-beta)) * f.rmsE / (fgBias * float64(f.bias)) }
	switch rest {
	case "attn_qkv.weight":
		t.vals = func(r, col0 int, v []float32, _ func() float64) bool {
			switch {
			case r == 0 || r == key || r == kh1*D || r == key+kh1*D:
				f.biasRow(v, col0, 1/float32(fgBias))
			case inHeads(r, 0) || inHeads(r, key):
				clear(v)
			case r >= 2*key && r < 2*key+2*D:
				d := (r - 2*key) % D
				if d < 2*R {
					unit(v, col0, d/2, float32(1-2*(d%2)))
				} else {
					clear(v)
				}
			default:
				return false
			}
			return true
		}
	case "ssm_conv1d.weight":
		t.vals = func(r, _ int, v []float32, _ func() float64) bool {
			if !inHeads(r, 0) && !inHeads(r, key) && !(r >= 2*key && r < 2*key+2*D) {
				return false
			}
			clear(v)
			v[len(v)-1] = 1 // the current token only
			return true
		}
	case "ssm_beta.weight":
		t.vals = func(r, col0 int, v []float32, _ func() float64) bool {
			switch r {
			case 0:
				f.biasRow(v, col0, float32(logit(1-f.decay)))
			case 1:
				f.biasRow(v, col0, float32(logit(1-fgSlow)))
			default:
				return false
			}
			return true
		}
	case "ssm_alpha.weight":
		t.vals = func(r, _ int, v []float32, _ func() float64) bool {
			if r > 1 {
				return false
			}
			clear(v)
			return true
		}
	case "ssm_a":
		t.vals = func(_, _ int, v []float32, rnd func() float64) bool {
			for i := range v {
				v[i] = float32(rnd())
			}
			v[0], v[1] = -1e-9, -1e-9 // decay exp(softplus(·)·A) = 1
			return true
		}
	case "ssm_norm.weight":
		t.vals = func(_, _ int, v []float32, rnd func() float64) bool {
			for i := range v {
				v[i] = float32(rnd())
				if i < 2*R {
					v[i] = 1
				}
			}
			return true
		}
	case "attn_gate.weight":
		w := fgGateZ * f.rmsE / (fgBias * float64(f.bias))
		t.vals = func(r, col0 int, v []float32, _ func() float64) bool {
			if r >= 2*D {
				return false
			}
			if r%D < 2*R {
				f.biasRow(v, col0, float32(w))
			} else {
				clear(v)
			}
			return true
		}
	case "ssm_out.weight":
		gain := float32(fgDNGain * math.Sqrt(2*float64(R)/float64(D)))
		t.rowStd = nil
		t.vals = func(r, col0 int, v []float32, _ func() float64) bool {
			switch {
			case r < R:
				clear(v)
			case r < 2*R:
				i := 2 * (r - R)
				clear(v)
				for j := range v {
					switch col0 + j {
					case i, D + i + 1:
						v[j] = gain
					case i + 1, D + i:
						v[j] = -gain
					}
				}
			case r < 2*R+fgBias:
				clear(v)
			default:
				return false
			}
			return true
		}
	}
}

// q4kBlock encodes 256 values as one Q4_K block with each sub-block's
// min/max range (no scale search: tensor.Quantize's search costs more than
// generating a random block, and synthesis must stay as fast as uniform's).
// A sub-block of zeros encodes exactly as zeros.
func q4kBlock(v []float32) []byte {
	var scale, mins [8]float64
	var maxScale, maxMin float64
	for j := range 8 {
		lo, hi := 0.0, 0.0
		for _, x := range v[32*j : 32*j+32] {
			lo, hi = min(lo, float64(x)), max(hi, float64(x))
		}
		scale[j], mins[j] = (hi-lo)/15, -lo
		maxScale, maxMin = max(maxScale, scale[j]), max(maxMin, mins[j])
	}
	b := make([]byte, 144)
	d16, dm16 := tensor.F32ToF16(float32(maxScale/63)), tensor.F32ToF16(float32(maxMin/63))
	binary.LittleEndian.PutUint16(b[0:], d16)
	binary.LittleEndian.PutUint16(b[2:], dm16)
	d, dm := float64(tensor.F16ToF32(d16)), float64(tensor.F16ToF32(dm16))
	var sc, m [8]uint8
	var L [256]uint8
	for j := range 8 {
		if d > 0 {
			sc[j] = uint8(min(63, math.Round(scale[j]/d)))
		}
		if dm > 0 {
			m[j] = uint8(min(63, math.Round(mins[j]/dm)))
		}
		step, off := d*float64(sc[j]), float64(dm*float64(m[j]))
		for i := 32 * j; i < 32*j+32; i++ {
			if step > 0 {
				L[i] = uint8(max(0, min(15, math.Round((float64(v[i])+off)/step))))
			}
		}
	}
	s := b[4:16]
	for j := range 4 {
		s[j] = sc[j]&63 | (sc[j+4]>>4)<<6
		s[j+4] = m[j]&63 | (m[j+4]>>4)<<6
		s[j+8] = sc[j+4]&0xF | (m[j+4]&0xF)<<4
	}
	q := b[16:]
	for j := 0; j < 256; j += 64 {
		for l := range 32 {
			q[l] = L[j+l] | L[j+l+32]<<4
		}
		q = q[32:]
	}
	return b
}
