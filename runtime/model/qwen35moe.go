package model

import (
	"fmt"

	"github.com/lesfarm/lesfarm/runtime/gguf"
	"github.com/lesfarm/lesfarm/runtime/moe"
	"github.com/lesfarm/lesfarm/runtime/pack"
	"github.com/lesfarm/lesfarm/runtime/tensor"
)

// qwen35moe (Qwen3.5-MoE, the text backbone of Qwen3.5-35B-A3B and
// MiniCPM-V 4.7 35B-A3B) is a hybrid stack: three of every four layers are
// Gated DeltaNet linear attention (deltanet.go), the rest gated full
// attention with partial NeoX rotary; every layer has routed top-k experts
// plus a shared expert behind a sigmoid gate; the last nextn_predict_layers
// blocks form the MTP/NextN drafting head (qwen35moe_mtp.go). The forward
// pass follows ../shared/testdata/qwen35moe/README.md step by step.

func init() {
	Register("qwen35moe", buildQwen35MoE)
}

// HybridConfig holds the qwen35moe hyper-parameters beyond Config.
type HybridConfig struct {
	Blocks        int // block_count: decoder layers + NextN blocks
	NextN         int // nextn_predict_layers
	ConvKernel    int // ssm.conv_kernel (taps of the causal depthwise conv)
	HeadDim       int // ssm.state_size: DeltaNet head width (k and v)
	KHeads        int // ssm.group_count: DeltaNet q/k heads
	VHeads        int // ssm.time_step_rank: DeltaNet v heads
	Inner         int // ssm.inner_size = VHeads × HeadDim
	FullAttnEvery int // full_attention_interval: layer i is attention iff (i+1) % it == 0
	SharedFFN     int // expert_shared_feed_forward_length
}

// convDim is the number of conv channels: q, k and v before the conv.
func (c HybridConfig) convDim() int { return 2*c.KHeads*c.HeadDim + c.Inner }

// hybridLayer holds the qwen35moe weights of one block that Layer has no
// field for: the DeltaNet projections (recurrent layers) and the shared
// expert (every layer). Attention weights, norms and the router live in
// the block's Layer.
type hybridLayer struct {
	recurrent bool

	// Gated DeltaNet.
	QKV, Z, Beta, Alpha, Out tensor.Matrix
	Conv                     []float32 // convDim × ConvKernel, tap 0 is the oldest token
	DtBias, A                []float32 // VHeads
	Norm                     []float32 // HeadDim, shared by the heads

	// Shared expert.
	ShGateInp        []float32 // Hidden: the sigmoid gate's weights
	ShGate, ShUp     tensor.Matrix
	ShDown           tensor.Matrix
	sharedExpertSize int64
}

// qwen35moe is the architecture of Qwen3.5-MoE: a hybrid stack of Gated
// DeltaNet and gated full-attention blocks, each with a routed MoE block
// and a shared expert, plus an optional MTP block (qwen35moe_arch.go has
// its architecture methods).
type qwen35moe struct {
	HybridConfig
	layers []hybridLayer // per decoder layer
	mtp    *mtpBlock     // nil when the file has no NextN block
	// bytes of DeltaNet and shared-expert matrices read per decoded token.
	activeBytes int64
}

// mtpBlock is the NextN block: eh_proj over [enorm(embed); hnorm(h)], one
// gated attention + MoE block, then shared_head_norm and the LM head.
type mtpBlock struct {
	index                  int // block index (Layers[...] of the source)
	EhProj                 tensor.Matrix
	ENorm, HNorm, HeadNorm []float32
	Embed, Output          tensor.Matrix // nextn.embed_tokens / shared_head_head, or the model's
	layer                  Layer
	hl                     hybridLayer
}

// Hybrid returns the qwen35moe hyper-parameters, or false for other
// architectures.
func (m *Model) Hybrid() (HybridConfig, bool) {
	a := m.q35()
	if a == nil {
		return HybridConfig{}, false
	}
	return a.HybridConfig, true
}

// HasMTP reports whether the model has a NextN (MTP) drafting block.
func (m *Model) HasMTP() bool {
	a := m.q35()
	return a != nil && a.mtp != nil
}

// q35 returns m's qwen35moe architecture, or nil for other architectures.
func (m *Model) q35() *qwen35moe {
	a, _ := m.arch.(*qwen35moe)
	return a
}

func readHybridConfig(f *gguf.File) (Config, HybridConfig, error) {
	const arch = "qwen35moe"
	r := metaReader{f: f, prefix: arch + "."}
	var h HybridConfig
	h.Blocks = r.int("block_count", 0)
	h.NextN = r.int("nextn_predict_layers", -1)
	if h.NextN < 0 {
		h.NextN = 0
	}
	h.ConvKernel = r.int("ssm.conv_kernel", 0)
	h.HeadDim = r.int("ssm.state_size", 0)
	h.KHeads = r.int("ssm.group_count", 0)
	h.VHeads = r.int("ssm.time_step_rank", 0)
	h.Inner = r.int("ssm.inner_size", 0)
	h.FullAttnEvery = r.int("full_attention_interval", 4)
	h.SharedFFN = r.int("expert_shared_feed_forward_length", 0)
	if r.err != nil {
		return Config{}, h, r.err
	}
	switch {
	case h.Blocks <= 0 || h.Blocks > 1024:
		return Config{}, h, fmt.Errorf("%sblock_count %d out of range", r.prefix, h.Blocks)
	case h.NextN >= h.Blocks:
		return Config{}, h, fmt.Errorf("%snextn_predict_layers %d must be smaller than block_count %d", r.prefix, h.NextN, h.Blocks)
	case h.NextN > 1:
		return Config{}, h, fmt.Errorf("%snextn_predict_layers %d: only one NextN block is supported", r.prefix, h.NextN)
	}
	cfg, err := readConfig(f, arch, true)
	if err != nil {
		return cfg, h, err
	}
	cfg.Layers = h.Blocks - h.NextN
	switch {
	case h.ConvKernel < 1 || h.ConvKernel > 64:
		return cfg, h, fmt.Errorf("%sssm.conv_kernel %d out of range [1, 64]", r.prefix, h.ConvKernel)
	case h.HeadDim <= 0 || h.HeadDim > 4096 || h.KHeads <= 0 || h.VHeads <= 0 || h.KHeads > 4096 || h.VHeads > 4096 || h.VHeads%h.KHeads != 0:
		return cfg, h, fmt.Errorf("bad DeltaNet geometry: ssm.state_size %d, ssm.group_count %d, ssm.time_step_rank %d (v heads must be a positive multiple of k heads)", h.HeadDim, h.KHeads, h.VHeads)
	case h.Inner != h.VHeads*h.HeadDim:
		return cfg, h, fmt.Errorf("bad DeltaNet geometry: ssm.inner_size %d / ssm.time_step_rank %d gives a v head size of %g, which must equal ssm.state_size %d", h.Inner, h.VHeads, float64(h.Inner)/float64(h.VHeads), h.HeadDim)
	case h.FullAttnEvery < 1:
		return cfg, h, fmt.Errorf("%sfull_attention_interval %d must be >= 1", r.prefix, h.FullAttnEvery)
	case h.SharedFFN <= 0:
		return cfg, h, fmt.Errorf("%sexpert_shared_feed_forward_length missing", r.prefix)
	case cfg.Heads > 4096 || cfg.HeadDim > 4096 || cfg.ValueDim != cfg.HeadDim:
		return cfg, h, fmt.Errorf("bad attention geometry: head_count %d, key_length %d, value_length %d (the output gate needs value_length = key_length)", cfg.Heads, cfg.HeadDim, cfg.ValueDim)
	}
	return cfg, h, nil
}

// isAttention reports whether decoder layer i is a full-attention layer.
func (c HybridConfig) isAttention(i int) bool { return (i+1)%c.FullAttnEvery == 0 }

// buildQwen35MoE binds a qwen35moe model. Every GGUF tensor name of the
// architecture appears here.
func buildQwen35MoE(f *gguf.File, opts Options) (*Model, error) {
	cfg, hc, err := readHybridConfig(f)
	if err != nil {
		return nil, err
	}
	b := &binder{f: f, swizzle: !opts.GGUFLayout}
	m := &Model{Config: cfg}
	hy := &qwen35moe{HybridConfig: hc}
	m.arch = hy
	m.Embed = b.matrix("token_embd.weight", cfg.Hidden, cfg.Vocab)
	m.OutNorm = b.vector("output_norm.weight", cfg.Hidden)
	if _, ok := f.Tensor("output.weight"); ok {
		m.Output = b.matrix("output.weight", cfg.Hidden, cfg.Vocab)
	} else {
		m.Output = m.Embed
	}
	blocks := hc.Blocks
	shapes := make([]moe.LayerShape, blocks)
	var blobs []*pack.Blob
	packCfg := cfg
	packCfg.Layers = blocks
	blobs = b.packedBlobs(packCfg)
	bindMoE := func(i int, l *Layer, hl *hybridLayer) {
		p := fmt.Sprintf("blk.%d.", i)
		l.AttnNorm = b.vector(p+"attn_norm.weight", cfg.Hidden)
		l.FFNNorm = b.vector(p+"post_attention_norm.weight", cfg.Hidden)
		r := b.matrix(p+"ffn_gate_inp.weight", cfg.Hidden, cfg.ExpertCount)
		l.Router = &r
		var gt, ut, dt tensor.Type
		if blobs != nil {
			types := b.packedExpertTypes(blobs, i, packCfg)
			gt, ut, dt = types[0], types[1], types[2]
		} else {
			types := b.stackedExpertTypes(i, cfg.Hidden, cfg.ExpertFFN, cfg.ExpertCount)
			gt, ut, dt = types[0], types[1], types[2]
		}
		shapes[i] = moe.LayerShape{Experts: cfg.ExpertCount, Hidden: cfg.Hidden, FFN: cfg.ExpertFFN, GateType: gt, UpType: ut, DownType: dt}
		l.Shape = shapes[i]
		m.ExpertBytes += int64(cfg.ExpertCount) * shapes[i].Bytes()
		// Shared expert: resident.
		hl.ShGateInp = b.vectorOrColumn(p+"ffn_gate_inp_shexp.weight", cfg.Hidden)
		hl.ShGate = b.matrix(p+"ffn_gate_shexp.weight", cfg.Hidden, hc.SharedFFN)
		hl.ShUp = b.matrix(p+"ffn_up_shexp.weight", cfg.Hidden, hc.SharedFFN)
		hl.ShDown = b.matrix(p+"ffn_down_shexp.weight", hc.SharedFFN, cfg.Hidden)
		hl.sharedExpertSize = int64(len(hl.ShGate.Data) + len(hl.ShUp.Data) + len(hl.ShDown.Data))
	}
	bindAttn := func(i int, l *Layer) {
		p := fmt.Sprintf("blk.%d.", i)
		qDim, kvDim, vDim := cfg.Heads*cfg.HeadDim, cfg.KVHeads*cfg.HeadDim, cfg.KVHeads*cfg.ValueDim
		l.Q = b.matrix(p+"attn_q.weight", cfg.Hidden, 2*qDim) // query + output gate per head
		l.K = b.matrix(p+"attn_k.weight", cfg.Hidden, kvDim)
		l.V = b.matrix(p+"attn_v.weight", cfg.Hidden, vDim)
		l.O = b.matrix(p+"attn_output.weight", cfg.Heads*cfg.ValueDim, cfg.Hidden)
		l.QNorm = b.vector(p+"attn_q_norm.weight", cfg.HeadDim)
		l.KNorm = b.vector(p+"attn_k_norm.weight", cfg.HeadDim)
	}
	m.Layers = make([]Layer, cfg.Layers)
	hy.layers = make([]hybridLayer, cfg.Layers)
	cd := hc.convDim()
	for i := range m.Layers {
		l, hl := &m.Layers[i], &hy.layers[i]
		p := fmt.Sprintf("blk.%d.", i)
		if hc.isAttention(i) {
			bindAttn(i, l)
		} else {
			hl.recurrent = true
			hl.QKV = b.matrix(p+"attn_qkv.weight", cfg.Hidden, cd)
			hl.Z = b.matrix(p+"attn_gate.weight", cfg.Hidden, hc.Inner)
			hl.Beta = b.matrix(p+"ssm_beta.weight", cfg.Hidden, hc.VHeads)
			hl.Alpha = b.matrix(p+"ssm_alpha.weight", cfg.Hidden, hc.VHeads)
			hl.Conv = b.floats(p+"ssm_conv1d.weight", hc.ConvKernel, cd)
			hl.DtBias = b.vector(p+"ssm_dt.bias", hc.VHeads)
			hl.A = b.vector(p+"ssm_a", hc.VHeads)
			hl.Norm = b.vector(p+"ssm_norm.weight", hc.HeadDim)
			hl.Out = b.matrix(p+"ssm_out.weight", hc.Inner, cfg.Hidden)
			hy.activeBytes += int64(len(hl.QKV.Data) + len(hl.Z.Data) + len(hl.Beta.Data) + len(hl.Alpha.Data) + len(hl.Out.Data))
		}
		bindMoE(i, l, hl)
		hy.activeBytes += hl.sharedExpertSize
	}
	if hc.NextN > 0 {
		i := cfg.Layers
		p := fmt.Sprintf("blk.%d.", i)
		mt := &mtpBlock{index: i}
		mt.EhProj = b.matrix(p+"nextn.eh_proj.weight", 2*cfg.Hidden, cfg.Hidden)
		mt.ENorm = b.vector(p+"nextn.enorm.weight", cfg.Hidden)
		mt.HNorm = b.vector(p+"nextn.hnorm.weight", cfg.Hidden)
		mt.HeadNorm = b.vector(p+"nextn.shared_head_norm.weight", cfg.Hidden)
		mt.Embed, mt.Output = m.Embed, m.Output
		if _, ok := f.Tensor(p + "nextn.embed_tokens.weight"); ok {
			mt.Embed = b.matrix(p+"nextn.embed_tokens.weight", cfg.Hidden, cfg.Vocab)
		}
		if _, ok := f.Tensor(p + "nextn.shared_head_head.weight"); ok {
			mt.Output = b.matrix(p+"nextn.shared_head_head.weight", cfg.Hidden, cfg.Vocab)
		}
		bindAttn(i, &mt.layer)
		bindMoE(i, &mt.layer, &mt.hl)
		hy.mtp = mt
	}
	if b.err != nil {
		return nil, b.err
	}
	m.ResidentBytes = b.bytes
	if opts.Experts != nil {
		src, err := opts.Experts(f, shapes)
		if err != nil {
			return nil, fmt.Errorf("expert source: %w", err)
		}
		m.Experts = src
	} else {
		res := &moe.Resident{Data: make([][]moe.Weights, blocks)}
		for i := range res.Data {
			if blobs != nil {
				res.Data[i], err = b.packedResident(i, shapes[i])
			} else {
				res.Data[i], err = b.stackedResident(i, cfg.ExpertCount)
			}
			if err == nil {
				err = b.swizzleExperts(res.Data[i], shapes[i])
			}
			if err != nil {
				return nil, err
			}
		}
		m.Experts = res
	}
	m.init(opts)
	return m, nil
}

// floats reads an F32/F16/BF16 tensor of the given dims as float32.
func (b *binder) floats(name string, dims ...int) []float32 {
	t, ok := b.info(name, dims...)
	if !ok {
		return nil
	}
	n := 1
	for _, d := range dims {
		n *= d
	}
	switch t.Type {
	case tensor.F32, tensor.F16, tensor.BF16:
	default:
		b.fail("tensor %s has type %s; want F32, F16 or BF16", name, t.Type)
		return nil
	}
	data, err := b.f.ReadTensor(name)
	if err != nil {
		b.fail("read %s: %w", name, err)
		return nil
	}
	b.bytes += int64(len(data))
	out := make([]float32, n)
	if err := tensor.Dequantize(t.Type, data, out); err != nil {
		b.fail("tensor %s: %v", name, err)
		return nil
	}
	return out
}

// vectorOrColumn reads a float vector stored as [n] or as an [n, 1]
// matrix (the converter writes HF's Linear(hidden, 1) as the latter).
func (b *binder) vectorOrColumn(name string, n int) []float32 {
	if t, ok := b.f.Tensor(name); ok && len(t.Dims) == 2 {
		return b.floats(name, n, 1)
	}
	return b.floats(name, n)
}
