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
//	[R, 2R)       the context part: an exponential moving average of the
//	              token parts of the text so far, written by layer 0's
//	              mixer (qwen3moe: one attention head whose RoPE phase makes
//	              its scores fall linearly with distance; qwen35moe: one
//	              Gated DeltaNet head with a constant key, so its state is
//	              the average); zero in the embedding
//	[2R, 2R+bias) a constant in every embedding row, the source of that
//	              head's constant query and key
//
// No other mixer writes to [0, 2R) (those output rows are zero) and the
// routed experts write there only with a small relative scale fgEps, so
// layer l+1's router sees almost the same routing coordinates on layer
// l's post-attention residual (the lookahead predictor's input) as on its
// own input: recall is high because the routing directions survive the
// layers, not because anything overrides routing. Layer 0 routes on the
// token part alone (its predictor sees only the embedding); layer l ≥ 1
// routes on a layer-specific random mix of token and context directions
// with a share fgCtx of the context, which sets token-to-token reuse.
// The constants were tuned with lesfarm routing-stats
// against the targets in docs/les.md.
const (
	fgBias    = 16   // constant coordinates
	fgDecay   = 0.85 // context EMA factor per token
	fgCtx     = 0.85 // share of the context in the routers of layers ≥ 1
	fgEps     = 0.25 // routed experts' output scale into the routing coordinates
	fgLogit   = 2.5  // router logit scale
	fgGateZ   = 4.0  // DeltaNet output gate pre-activation (silu(4) ≈ 3.9)
	fgDNGain  = 0.22 // DeltaNet context output gain at 2R = head width
	fgRopeMax = 1e-4 // largest RoPE frequency of the context head's pair
)

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
	case c.Arch == "qwen35moe" && IsFullAttention(0, c.FullAttnInterval):
		return fmt.Errorf("synth: routing %s needs layer 0 to be Gated DeltaNet (full-attn-interval >= 2)", c.Routing)
	}
	return nil
}

// fine holds the construction's derived sizes.
type fine struct {
	c     *SynthConfig
	R     int
	bias  float32 // value of the constant coordinates
	rmsE  float64 // RMS of an embedding row
	decay float64
}

// fineGrained attaches the fine-grained-moe structure to the tensors ts
// (see the comment on the constants above).
func (c *SynthConfig) fineGrained(ts []synthTensor) {
	f := &fine{c: c, R: c.routingDims(), decay: fgDecay}
	f.bias = float32(math.Sqrt(float64(c.Hidden) / (4 * fgBias)))
	f.rmsE = math.Sqrt(1 + fgBias*float64(f.bias*f.bias)/float64(c.Hidden))
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
		case "ffn_gate_inp.weight":
			t.vals = f.router(l, c.Seed)
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
}

// protect is the std scale of output row r: s inside [0, 2R), else 1.
func (f *fine) protect(r int, s float64) float64 {
	if r < 2*f.R {
		return s
	}
	return 1
}

// embedding fills the blocks of an embedding row that hold the routing
// subspace: random token part, zero context part, constant coordinates.
func (f *fine) embedding(_, col0 int, v []float32, rnd func() float64) bool {
	R := f.R
	if col0 >= 2*R+fgBias {
		return false
	}
	for i := range v {
		switch col := col0 + i; {
		case col >= R && col < 2*R:
			v[i] = 0
		case col >= 2*R && col < 2*R+fgBias:
			v[i] = f.bias
		default:
			v[i] = float32(rnd())
		}
	}
	return true
}

// router returns the vals of layer l's router: row e reads the token part
// (layer 0) or a layer-specific random mix of token and context parts.
func (f *fine) router(l int, seed uint64) func(row, col0 int, v []float32, _ func() float64) bool {
	g := newRNG(seed, fmt.Sprintf("routing/%d", l))
	R := f.R
	share := 0.0
	if l > 0 {
		share = fgCtx
	}
	wt, wc := math.Sqrt(1-share), math.Sqrt(share)
	row := make([]float32, f.c.Hidden)
	last := -1
	return func(r, col0 int, v []float32, _ func() float64) bool {
		if r != last { // one row per expert (an F32 row comes in one call)
			last = r
			clear(row)
			n := fgLogit / math.Sqrt(float64(R))
			for i := range R {
				row[i] = float32(n * wt * g.normal())
				row[R+i] = float32(n * wc * g.normal())
			}
		}
		copy(v, row[col0:])
		return true
	}
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

// contextMixer makes layer 0's mixer write the context part.
func (f *fine) contextMixer(t *synthTensor, rest string) {
	if f.c.Arch == "qwen35moe" {
		f.deltaNetContext(t, rest)
		return
	}
	c, R := f.c, f.R
	D := c.HeadDim
	// The rotary pair (p, p+D/2) with the largest frequency ≤ fgRopeMax
	// and 1/context: q on its second element and k on its first give
	// scores −A·sin(θΔ) ≈ −A·θ·Δ at distance Δ, so the softmax weights
	// fall as decay^Δ (normalised over the positions so far).
	scale := math.Pow(float64(c.ropeBase()), -2/float64(D))
	theta, p := 1.0, 0
	for p < D/2-1 && theta > min(fgRopeMax, 1/float64(c.Context)) {
		theta *= scale
		p++
	}
	w := float32(math.Sqrt(-math.Log(f.decay) / (math.Sqrt(float64(D)) * theta)))
	switch rest {
	case "attn_q.weight":
		t.vals = func(r, col0 int, v []float32, _ func() float64) bool {
			if r >= D {
				return false
			}
			if r == p+D/2 {
				f.biasRow(v, col0, 1/float32(fgBias))
			} else {
				clear(v)
			}
			return true
		}
	case "attn_k.weight":
		t.vals = func(r, col0 int, v []float32, _ func() float64) bool {
			if r >= D {
				return false
			}
			if r == p {
				f.biasRow(v, col0, 1/float32(fgBias))
			} else {
				clear(v)
			}
			return true
		}
	case "attn_v.weight":
		t.vals = func(r, col0 int, v []float32, _ func() float64) bool {
			if r >= D {
				return false
			}
			unit(v, col0, map[bool]int{true: r, false: -1}[r < R], 1)
			return true
		}
	case "attn_q_norm.weight", "attn_k_norm.weight":
		at := p
		if rest == "attn_q_norm.weight" {
			at = p + D/2
		}
		t.vals = func(_, _ int, v []float32, rnd func() float64) bool {
			for i := range v {
				v[i] = float32(rnd())
			}
			v[at] = w
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
				unit(v, col0, r-R, gain) // head 0, dim r-R
			default:
				return false
			}
			return true
		}
	}
}

// deltaNetContext makes v-head 0 of qwen35moe's layer 0 a moving average
// of the token part: q and k of k-head 0 are constant unit vectors (from
// the constant coordinates), so the state's readout Sᵀk follows
// Sᵀk ← (1−β)·Sᵀk + β·v with the decay at 1; v holds each token
// coordinate twice, as silu(+x) and silu(−x), whose difference is x.
func (f *fine) deltaNetContext(t *synthTensor, rest string) {
	c, R := f.c, f.R
	q := c.Qwen35
	D, key := q.SSMState, q.SSMGroups*q.SSMState
	beta := 1 - f.decay
	inRange := func(r, lo int) bool { return r >= lo && r < lo+D }
	switch rest {
	case "attn_qkv.weight":
		t.vals = func(r, col0 int, v []float32, _ func() float64) bool {
			switch {
			case r == 0 || r == key:
				f.biasRow(v, col0, 1/float32(fgBias))
			case inRange(r, 0) || inRange(r, key):
				clear(v)
			case inRange(r, 2*key):
				d := r - 2*key
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
			if !inRange(r, 0) && !inRange(r, key) && !inRange(r, 2*key) {
				return false
			}
			clear(v)
			v[len(v)-1] = 1 // the current token only
			return true
		}
	case "ssm_beta.weight":
		w := math.Log(beta/(1-beta)) * f.rmsE / (fgBias * float64(f.bias))
		t.vals = func(r, col0 int, v []float32, _ func() float64) bool {
			if r != 0 {
				return false
			}
			f.biasRow(v, col0, float32(w))
			return true
		}
	case "ssm_alpha.weight":
		t.vals = func(r, _ int, v []float32, _ func() float64) bool {
			if r != 0 {
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
			v[0] = -1e-9 // decay exp(softplus(·)·A) = 1
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
			if r >= D {
				return false
			}
			if r < 2*R {
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
					case i:
						v[j] = gain
					case i + 1:
						v[j] = -gain
					}
				}
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
		step, off := d*float64(sc[j]), dm*float64(m[j])
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
