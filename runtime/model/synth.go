package model

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"math"

	"github.com/lesfarm/lesfarm/runtime/gguf"
	"github.com/lesfarm/lesfarm/runtime/tensor"
)

// SynthConfig describes a random-weight model for WriteSynthetic. Zero
// fields get defaults (see Defaults).
type SynthConfig struct {
	Arch        string // "qwen3moe" (default), "qwen3" (dense) or "qwen35moe"
	Layers      int    // decoder layers (qwen35moe: without the MTP blocks)
	Experts     int    // qwen3moe, qwen35moe
	ExpertsUsed int    // qwen3moe, qwen35moe
	Hidden      int
	ExpertFFN   int // qwen3moe: per-expert FFN width; qwen3: dense FFN width
	Heads       int
	KVHeads     int
	HeadDim     int // default Hidden/Heads
	Vocab       int
	Context     int
	Type        tensor.Type // matrices; norms and the router stay F32
	Seed        uint64
	// Routing is the routing preset: RoutingUniform (the default, "") or
	// RoutingFineGrained (synth_routing.go).
	Routing string
	// Qwen35 holds the qwen35moe-only geometry (see synth_qwen35.go).
	Qwen35
	// Progress, if set, is called with bytes of tensor data written so far
	// and the total.
	Progress func(done, total int64)
}

// SynthTypes are the weight types WriteSynthetic can generate.
var SynthTypes = []tensor.Type{tensor.Q4_K, tensor.Q8_0, tensor.F16, tensor.F32}

// Defaults fills zero fields and validates the geometry.
func (c *SynthConfig) Defaults() error {
	if c.Arch == "" {
		c.Arch = "qwen3moe"
	}
	if c.Heads > 0 && c.HeadDim == 0 && c.Hidden > 0 {
		c.HeadDim = c.Hidden / c.Heads
	}
	if c.KVHeads == 0 {
		c.KVHeads = c.Heads
	}
	if c.Context == 0 {
		c.Context = 4096
	}
	if c.Type == 0 && !c.Type.Known() {
		c.Type = tensor.F32
	}
	if c.Arch == "qwen35moe" {
		c.defaultsQwen35()
	}
	switch {
	case c.Arch != "qwen3moe" && c.Arch != "qwen3" && c.Arch != "qwen35moe":
		return fmt.Errorf("synth: unknown architecture %q (supported: qwen3moe, qwen3, qwen35moe)", c.Arch)
	case c.Layers < 1 || c.Layers > 1024:
		return fmt.Errorf("synth: layers %d must be in [1, 1024]", c.Layers)
	case c.Hidden < 32 || c.Hidden%32 != 0:
		return fmt.Errorf("synth: hidden %d must be a positive multiple of 32", c.Hidden)
	case c.Heads < 1 || c.KVHeads < 1 || c.Heads%c.KVHeads != 0:
		return fmt.Errorf("synth: heads %d must be a positive multiple of kv-heads %d", c.Heads, c.KVHeads)
	case c.HeadDim < 2 || c.HeadDim%2 != 0 || (c.Heads*c.HeadDim)%32 != 0:
		return fmt.Errorf("synth: head dim %d must be even and heads×head dim a multiple of 32", c.HeadDim)
	case c.ExpertFFN < 32 || c.ExpertFFN%32 != 0:
		return fmt.Errorf("synth: expert FFN %d must be a positive multiple of 32", c.ExpertFFN)
	case c.Vocab < 300 || c.Vocab > 1<<20:
		return fmt.Errorf("synth: vocab %d must be in [300, 1048576] (256 byte tokens, merges and <|endoftext|>)", c.Vocab)
	case c.Context < 16:
		return fmt.Errorf("synth: context %d must be >= 16", c.Context)
	}
	if c.Arch != "qwen3" && (c.Experts < 1 || c.ExpertsUsed < 1 || c.ExpertsUsed > c.Experts || c.Experts > 4096) {
		return fmt.Errorf("synth: experts %d / experts-used %d: need 1 <= experts-used <= experts <= 4096", c.Experts, c.ExpertsUsed)
	}
	if c.Arch == "qwen35moe" {
		if err := c.validateQwen35(); err != nil {
			return err
		}
	}
	if err := c.validateRouting(); err != nil {
		return err
	}
	ok := false
	for _, t := range SynthTypes {
		ok = ok || t == c.Type
	}
	if !ok {
		return fmt.Errorf("synth: type %s is not supported (use Q4_K, Q8_0, F16 or F32)", c.Type)
	}
	return nil
}

// synthTensor is one tensor to generate: its type, dims and the standard
// deviation (or mean for norm vectors) of its values.
type synthTensor struct {
	name string
	typ  tensor.Type
	dims []uint64
	std  float64
	mean float64
	// negExp makes the values −exp(mean + std·z) (qwen35moe's ssm_a).
	negExp bool
	// rowStd, when set, scales std for row r (a row is dims[0] values);
	// 0 writes a zero row (synth_routing.go).
	rowStd func(row int) float64
	// vals, when set and it returns true, supplies the block of values
	// starting at (row, col0) instead of random ones; rnd draws one of the
	// tensor's random values (synth_routing.go).
	vals func(row, col0 int, v []float32, rnd func() float64) bool
	// fastQ4K encodes vals' Q4_K blocks by their sub-blocks' ranges
	// (q4kBlock) instead of tensor.Quantize's search: exact for zero and
	// constant sub-blocks, not for zeros beside values of both signs.
	fastQ4K bool
}

// matType returns c.Type when a row of cols fits its block size, else the
// fallback llama-quantize would use (Q8_0, then F16).
func (c *SynthConfig) matType(cols int) tensor.Type {
	for _, t := range []tensor.Type{c.Type, tensor.Q8_0, tensor.F16} {
		if _, err := t.RowSize(cols); err == nil {
			return t
		}
	}
	return tensor.F32
}

// tensors lists the tensors of the model in file order. Scales follow the
// golden fixture's recipe, generalised to any width: inputs to every matrix
// have RMS ≈ 1 after RMSNorm, so weights of std 1/sqrt(cols) give unit
// outputs; output projections are halved so the residual stream grows
// slowly; the router's std 2/sqrt(hidden) gives router logits of std ≈ 2,
// which is peaked but token-dependent routing.
func (c *SynthConfig) tensors() []synthTensor {
	if c.Arch == "qwen35moe" {
		return c.tensorsQwen35()
	}
	H, qd, kvd := c.Hidden, c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	u := func(xs ...int) []uint64 {
		out := make([]uint64, len(xs))
		for i, x := range xs {
			out[i] = uint64(x)
		}
		return out
	}
	inv := func(n int) float64 { return 1 / math.Sqrt(float64(n)) }
	ts := []synthTensor{{name: "token_embd.weight", typ: c.matType(H), dims: u(H, c.Vocab), std: 1}}
	for l := range c.Layers {
		p := fmt.Sprintf("blk.%d.", l)
		ts = append(ts,
			synthTensor{name: p + "attn_norm.weight", typ: tensor.F32, dims: u(H), std: 0.1, mean: 1},
			synthTensor{name: p + "attn_q.weight", typ: c.matType(H), dims: u(H, qd), std: inv(H)},
			synthTensor{name: p + "attn_k.weight", typ: c.matType(H), dims: u(H, kvd), std: inv(H)},
			synthTensor{name: p + "attn_v.weight", typ: c.matType(H), dims: u(H, kvd), std: inv(H)},
			synthTensor{name: p + "attn_output.weight", typ: c.matType(qd), dims: u(qd, H), std: 0.5 * inv(qd)},
			synthTensor{name: p + "attn_q_norm.weight", typ: tensor.F32, dims: u(c.HeadDim), std: 0.1, mean: 1},
			synthTensor{name: p + "attn_k_norm.weight", typ: tensor.F32, dims: u(c.HeadDim), std: 0.1, mean: 1},
			synthTensor{name: p + "ffn_norm.weight", typ: tensor.F32, dims: u(H), std: 0.1, mean: 1},
		)
		F := c.ExpertFFN
		if c.Arch == "qwen3moe" {
			E := c.Experts
			ts = append(ts,
				synthTensor{name: p + "ffn_gate_inp.weight", typ: tensor.F32, dims: u(H, E), std: 2 * inv(H)},
				synthTensor{name: p + "ffn_gate_exps.weight", typ: c.matType(H), dims: u(H, F, E), std: inv(H)},
				synthTensor{name: p + "ffn_up_exps.weight", typ: c.matType(H), dims: u(H, F, E), std: inv(H)},
				synthTensor{name: p + "ffn_down_exps.weight", typ: c.matType(F), dims: u(F, H, E), std: 0.5 * inv(F)},
			)
		} else {
			ts = append(ts,
				synthTensor{name: p + "ffn_gate.weight", typ: c.matType(H), dims: u(H, F), std: inv(H)},
				synthTensor{name: p + "ffn_up.weight", typ: c.matType(H), dims: u(H, F), std: inv(H)},
				synthTensor{name: p + "ffn_down.weight", typ: c.matType(F), dims: u(F, H), std: 0.5 * inv(F)},
			)
		}
	}
	ts = append(ts,
		synthTensor{name: "output_norm.weight", typ: tensor.F32, dims: u(H), std: 0.1, mean: 1},
		synthTensor{name: "output.weight", typ: c.matType(H), dims: u(H, c.Vocab), std: 1.6 * inv(H)},
	)
	return ts
}

// SynthSize returns the file's tensor data size in bytes for c (after
// Defaults), so callers can size progress bars and check disk space.
func SynthSize(c SynthConfig) (int64, error) {
	if err := c.Defaults(); err != nil {
		return 0, err
	}
	var n int64
	for _, t := range c.tensors() {
		s, err := gguf.TensorSize(t.typ, t.dims)
		if err != nil {
			return 0, err
		}
		n += s
	}
	return n, nil
}

// WriteSynthetic streams a random-weight GGUF model described by c to w,
// with a byte-level BPE tokenizer so it can be run with generate. Weights
// are generated block by block, so memory use is independent of model size.
// The same config (including Seed) always writes the same bytes.
func WriteSynthetic(w io.Writer, c SynthConfig) error {
	if err := c.Defaults(); err != nil {
		return err
	}
	gw := gguf.NewWriter(w)
	a := c.Arch
	kv := []struct {
		k string
		v any
	}{
		{"general.architecture", a},
		{"general.name", fmt.Sprintf("synthetic-%s-%dL-%dE-top%d-h%d-f%d-%s", a, c.Layers, c.Experts, c.ExpertsUsed, c.Hidden, c.ExpertFFN, c.Type)},
		{"general.type", "model"},
		{"general.description", fmt.Sprintf("random weights written by lesfarm synth, seed %d; for benchmarks, not for text", c.Seed)},
		{a + ".block_count", uint32(c.blockCount())},
		{a + ".context_length", uint32(c.Context)},
		{a + ".embedding_length", uint32(c.Hidden)},
		{a + ".attention.head_count", uint32(c.Heads)},
		{a + ".attention.head_count_kv", uint32(c.KVHeads)},
		{a + ".attention.key_length", uint32(c.HeadDim)},
		{a + ".attention.value_length", uint32(c.HeadDim)},
		{a + ".rope.freq_base", c.ropeBase()},
		{a + ".attention.layer_norm_rms_epsilon", float32(1e-6)},
	}
	switch a {
	case "qwen35moe":
		kv = append(kv, c.kvQwen35()...)
	case "qwen3moe":
		kv = append(kv, []struct {
			k string
			v any
		}{
			{a + ".feed_forward_length", uint32(c.ExpertFFN * c.ExpertsUsed)},
			{a + ".expert_count", uint32(c.Experts)},
			{a + ".expert_used_count", uint32(c.ExpertsUsed)},
			{a + ".expert_feed_forward_length", uint32(c.ExpertFFN)},
		}...)
	default:
		kv = append(kv, struct {
			k string
			v any
		}{a + ".feed_forward_length", uint32(c.ExpertFFN)})
	}
	if c.Routing == RoutingFineGrained {
		// Readers (bench's report header) name the preset from the file.
		kv = append(kv, struct {
			k string
			v any
		}{SynthRoutingKey, c.Routing})
	}
	for _, p := range kv {
		if err := gw.AddKV(p.k, p.v); err != nil {
			return err
		}
	}
	voc, err := c.vocabulary()
	if err != nil {
		return err
	}
	if err := addByteBPE(gw, voc, c.pretokenizer()); err != nil {
		return err
	}
	ts := c.tensors()
	if c.Routing == RoutingFineGrained {
		if err := c.fineGrained(ts, voc); err != nil {
			return err
		}
	}
	var total int64
	for _, t := range ts {
		if err := gw.AddTensor(t.name, t.typ, t.dims); err != nil {
			return err
		}
		s, _ := gguf.TensorSize(t.typ, t.dims)
		total += s
	}
	if err := gw.WriteHeader(); err != nil {
		return err
	}
	var done int64
	for _, t := range ts {
		size, _ := gguf.TensorSize(t.typ, t.dims)
		r := &randTensor{t: t, left: size, rng: newRNG(c.Seed, t.name)}
		pr := &progressReader{r: bufio.NewReaderSize(r, 1<<20), done: &done, total: total, fn: c.Progress}
		if err := gw.WriteTensorData(t.name, pr); err != nil {
			return err
		}
	}
	return gw.Close()
}

type progressReader struct {
	r     io.Reader
	done  *int64
	total int64
	fn    func(done, total int64)
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	*p.done += int64(n)
	if p.fn != nil && n > 0 {
		p.fn(*p.done, p.total)
	}
	return n, err
}

// rng is xorshift64*: fast, and good enough for random weights.
type rng struct{ s uint64 }

func newRNG(seed uint64, name string) *rng {
	s := seed*0x9e3779b97f4a7c15 ^ uint64(crc32.ChecksumIEEE([]byte(name)))<<17 ^ 0x2545f4914f6cdd1d
	if s == 0 {
		s = 1
	}
	r := &rng{s}
	for range 4 {
		r.next()
	}
	return r
}

func (r *rng) next() uint64 {
	r.s ^= r.s >> 12
	r.s ^= r.s << 25
	r.s ^= r.s >> 27
	return r.s * 2685821657736338717
}

// normal returns an approximately standard normal value (sum of four
// uniforms, rescaled), cheap and bounded.
func (r *rng) normal() float64 {
	x := r.next()
	var s float64
	for range 4 {
		s += float64(float64(x&0xffff) / 65536)
		x >>= 16
	}
	return (s - 2) * math.Sqrt(3)
}

// randTensor generates a tensor's data block by block.
type randTensor struct {
	t    synthTensor
	left int64
	rng  *rng
	buf  []byte
	off  int64 // elements generated, for structured tensors
	fbuf []float32
	rndf func() float64 // r.rnd, bound once
}

func (r *randTensor) Read(p []byte) (int, error) {
	if r.left == 0 {
		return 0, io.EOF
	}
	n := 0
	for n < len(p) && r.left > 0 {
		if len(r.buf) == 0 {
			r.buf = r.block()
		}
		k := copy(p[n:], r.buf)
		r.buf = r.buf[k:]
		n += k
		r.left -= int64(k)
	}
	return n, nil
}

// block returns the next block (or 256 plain values) of random data; a
// tensor with rowStd or vals gets one block (F32 and F16: one row) at a
// time with its row's scale or structured values.
func (r *randTensor) block() []byte {
	t := r.t
	if t.rowStd == nil && t.vals == nil {
		return r.randBlock(t.std, 256)
	}
	cols := int64(t.dims[0])
	n := cols
	switch t.typ {
	case tensor.Q4_K:
		n = 256
	case tensor.Q8_0:
		n = 32
	}
	row, col := int(r.off/cols), int(r.off%cols)
	r.off += n
	if t.vals != nil {
		if cap(r.fbuf) < int(n) {
			r.fbuf = make([]float32, n)
		}
		v := r.fbuf[:n]
		if r.rndf == nil {
			r.rndf = r.rnd
		}
		if t.vals(row, col, v, r.rndf) {
			return encodeBlock(t.typ, v, t.fastQ4K)
		}
	}
	std := t.std
	if t.rowStd != nil {
		std *= t.rowStd(row)
	}
	if std == 0 && t.mean == 0 && !t.negExp && t.typ != tensor.F16 && t.typ != tensor.F32 {
		size, _ := t.typ.RowSize(int(n))
		return make([]byte, size) // d = 0: a zero block
	}
	return r.randBlock(std, int(n))
}

// rnd draws one of the tensor's random values.
func (r *randTensor) rnd() float64 {
	v := r.t.mean + float64(r.t.std*r.rng.normal())
	if r.t.negExp {
		v = -math.Exp(v)
	}
	return v
}

// encodeBlock writes the values v (a whole number of blocks) in typ; fast
// picks q4kBlock for Q4_K (see synthTensor.fastQ4K).
func encodeBlock(typ tensor.Type, v []float32, fast bool) []byte {
	switch typ {
	case tensor.F32:
		b := make([]byte, 4*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
		}
		return b
	case tensor.F16:
		b := make([]byte, 2*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint16(b[2*i:], tensor.F32ToF16(x))
		}
		return b
	case tensor.Q4_K:
		if fast && len(v) == 256 {
			return q4kBlock(v)
		}
	}
	size, err := typ.RowSize(len(v))
	if err != nil {
		panic(err) // blocks are whole by construction
	}
	b := make([]byte, size)
	if err := tensor.Quantize(typ, v, b); err != nil {
		panic(err)
	}
	return b
}

// randBlock returns one block of random data of standard deviation std
// (F32 and F16: n plain values).
func (r *randTensor) randBlock(std float64, n int) []byte {
	t := r.t
	g := r.rng
	switch t.typ {
	case tensor.F32:
		b := make([]byte, 4*n)
		for i := range n {
			v := t.mean + float64(std*g.normal())
			if t.negExp {
				v = -math.Exp(v)
			}
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(v)))
		}
		return b
	case tensor.F16:
		b := make([]byte, 2*n)
		for i := range n {
			binary.LittleEndian.PutUint16(b[2*i:], tensor.F32ToF16(float32(t.mean+float64(std*g.normal()))))
		}
		return b
	case tensor.Q8_0:
		// d = std/42, q ≈ 42·N(0,1) clipped to int8.
		b := make([]byte, 34)
		binary.LittleEndian.PutUint16(b, tensor.F32ToF16(float32(std/42)))
		for i := range 32 {
			q := math.Round(42 * g.normal())
			b[2+i] = byte(int8(max(-127, min(127, q))))
		}
		return b
	case tensor.Q4_K:
		// value = d·sc·q − dmin·m with q the mean of two uniform nibbles
		// (0..15, mean 7.25, std ≈ 3.26) and dmin·m ≈ d·sc·7.25, so values are centred
		// with std ≈ d·sc·3.26.
		b := make([]byte, 144)
		var sc, m [8]uint8
		var sumSc float64
		for j := range 8 {
			sc[j] = uint8(24 + g.next()%33)                     // 24..56
			m[j] = uint8(math.Round(float64(sc[j]) * 7.25 / 8)) // E[floor((a+b)/2)] = 7.25
			sumSc += float64(sc[j])
		}
		d := std / (sumSc / 8 * 3.26)
		binary.LittleEndian.PutUint16(b[0:], tensor.F32ToF16(float32(d)))
		binary.LittleEndian.PutUint16(b[2:], tensor.F32ToF16(float32(8*d)))
		s := b[4:16]
		for j := range 4 {
			s[j] = sc[j]&63 | (sc[j+4]>>4)<<6
			s[j+4] = m[j]&63 | (m[j+4]>>4)<<6
			s[j+8] = sc[j+4]&0xF | (m[j+4]&0xF)<<4
		}
		qs := b[16:]
		for i := 0; i < 128; i += 8 {
			x, y := g.next(), g.next()
			for k := range 8 {
				lo := (x>>(8*k))&15 + (y>>(8*k))&15
				hi := (x>>(8*k+4))&15 + (y>>(8*k+4))&15
				qs[i+k] = byte(lo/2) | byte(hi/2)<<4
			}
		}
		return b
	}
	panic("synth: unsupported type " + t.typ.String())
}
