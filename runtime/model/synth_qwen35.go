package model

import (
	"fmt"
	"math"
	"sort"

	"github.com/lesfarm/lesfarm/runtime/tensor"
)

// Qwen35 is the qwen35moe-only part of a SynthConfig: the Gated DeltaNet
// geometry, the shared expert, the layer pattern and the MTP blocks. Zero
// fields get defaults shaped like the golden fixture
// (../shared/testdata/qwen35moe): DeltaNet heads of HeadDim/2 with
// Heads/2 k-heads and twice as many v-heads, a conv of 4, a shared expert
// as wide as a routed one, rotary on the first quarter of each head, and
// full attention in every fourth layer.
type Qwen35 struct {
	// SharedFFN is the shared expert's width
	// (expert_shared_feed_forward_length); default ExpertFFN.
	SharedFFN int
	// FullAttnInterval: layer i is full attention iff (i+1) % interval ==
	// 0, the others Gated DeltaNet (full_attention_interval); default 4.
	FullAttnInterval int
	// MTPLayers is the number of MTP/NextN blocks appended after Layers
	// (nextn_predict_layers). Set NoMTP for none; zero means 1.
	MTPLayers int
	NoMTP     bool
	// SSMGroups and SSMHeads are the DeltaNet k-heads (ssm.group_count)
	// and v-heads (ssm.time_step_rank); SSMState is the head width of
	// both (ssm.state_size); ConvKernel the causal conv width
	// (ssm.conv_kernel).
	SSMGroups, SSMHeads, SSMState, ConvKernel int
	// RopeDim is the rotary width of a full-attention head
	// (rope.dimension_count); default HeadDim/4.
	RopeDim int
}

// SynthPresets are named SynthConfigs, for lesfarm synth --preset. The
// qwen35moe-35b-a3b preset is the published Qwen3.5-35B-A3B text backbone
// (also MiniCPM-V 4.7 35B-A3B's): 40 layers (30 Gated DeltaNet, 10 gated
// full attention) plus one MTP block, 256 routed experts with top-8 and one
// shared expert of width 512, hidden 2048, 16 query / 2 KV heads of 256,
// DeltaNet 16 k-heads / 32 v-heads of 128, conv 4, and Qwen3.5's 248,320-token
// vocabulary; it is about 20 GB in Q4_K. qwen35moe-35b-a3b-scaled keeps
// every per-layer dimension but has 8 layers (6 DeltaNet, 2 attention)
// and a 32,768-token vocabulary, so it fits this kind of machine (about
// 3.8 GB in Q4_K) with the real expert size, expert count and top-k.
var SynthPresets = map[string]SynthConfig{
	"qwen35moe-35b-a3b":        qwen35Shape(40, 248320),
	"qwen35moe-35b-a3b-scaled": qwen35Shape(8, 32768),
}

func qwen35Shape(layers, vocab int) SynthConfig {
	return SynthConfig{
		Arch: "qwen35moe", Layers: layers, Experts: 256, ExpertsUsed: 8, Hidden: 2048, ExpertFFN: 512,
		Heads: 16, KVHeads: 2, HeadDim: 256, Vocab: vocab, Context: 262144,
		Qwen35: Qwen35{SharedFFN: 512, FullAttnInterval: 4, MTPLayers: 1, SSMGroups: 16, SSMHeads: 32, SSMState: 128, ConvKernel: 4, RopeDim: 64},
	}
}

// PresetNames returns the names of SynthPresets, sorted.
func PresetNames() []string {
	out := make([]string, 0, len(SynthPresets))
	for n := range SynthPresets {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func (c *SynthConfig) defaultsQwen35() {
	q := &c.Qwen35
	if q.SharedFFN == 0 {
		q.SharedFFN = c.ExpertFFN
	}
	if q.FullAttnInterval == 0 {
		q.FullAttnInterval = 4
	}
	if q.NoMTP {
		q.MTPLayers = 0
	} else if q.MTPLayers == 0 {
		q.MTPLayers = 1
	}
	if q.SSMState == 0 {
		q.SSMState = c.HeadDim / 2
	}
	if q.SSMGroups == 0 {
		q.SSMGroups = max(1, c.Heads/2)
	}
	if q.SSMHeads == 0 {
		q.SSMHeads = 2 * q.SSMGroups
	}
	if q.ConvKernel == 0 {
		q.ConvKernel = 4
	}
	if q.RopeDim == 0 {
		q.RopeDim = max(2, c.HeadDim/4&^1)
	}
}

func (c *SynthConfig) validateQwen35() error {
	q := c.Qwen35
	switch {
	case q.SharedFFN < 32 || q.SharedFFN%32 != 0:
		return fmt.Errorf("synth: shared expert FFN %d must be a positive multiple of 32", q.SharedFFN)
	case q.FullAttnInterval < 1 || q.FullAttnInterval > 1024:
		return fmt.Errorf("synth: full-attention interval %d must be in [1, 1024]", q.FullAttnInterval)
	case q.MTPLayers < 0 || q.MTPLayers > 8:
		return fmt.Errorf("synth: MTP layers %d must be in [0, 8]", q.MTPLayers)
	case c.Layers+q.MTPLayers > 1024:
		return fmt.Errorf("synth: %d layers + %d MTP layers exceed 1024", c.Layers, q.MTPLayers)
	case q.SSMGroups < 1 || q.SSMHeads < 1 || q.SSMHeads%q.SSMGroups != 0:
		return fmt.Errorf("synth: DeltaNet v-heads %d must be a positive multiple of k-heads %d", q.SSMHeads, q.SSMGroups)
	case q.SSMState < 2 || q.SSMState > 1024 || q.SSMState%2 != 0 || (q.SSMHeads*q.SSMState)%32 != 0:
		return fmt.Errorf("synth: DeltaNet state size %d must be even, at most 1024, and v-heads×state a multiple of 32", q.SSMState)
	case q.ConvKernel < 2 || q.ConvKernel > 64:
		return fmt.Errorf("synth: conv kernel %d must be in [2, 64]", q.ConvKernel)
	case q.RopeDim < 2 || q.RopeDim > c.HeadDim || q.RopeDim%2 != 0:
		return fmt.Errorf("synth: rope dims %d must be even and at most the head dim %d", q.RopeDim, c.HeadDim)
	}
	return nil
}

// ropeSections splits the rotary pairs into Qwen3.5's M-RoPE sections
// (11, 11, 10 of 32 pairs), scaled, with a 0 fourth section as the
// converter writes it.
func (q Qwen35) ropeSections() []int32 {
	p := q.RopeDim / 2
	a := int32(math.Round(float64(p) * 11 / 32))
	return []int32{a, a, int32(p) - 2*a, 0}
}

// IsFullAttention reports whether decoder layer il of a qwen35moe model
// with this full-attention interval uses gated full attention (else Gated
// DeltaNet), as llama.cpp derives it.
func IsFullAttention(il, interval int) bool { return interval > 0 && (il+1)%interval == 0 }

func (c *SynthConfig) kvQwen35() []struct {
	k string
	v any
} {
	a, q := c.Arch, c.Qwen35
	kv := []struct {
		k string
		v any
	}{
		{"general.file_type", fileType(c.Type)},
		{a + ".nextn_predict_layers", uint32(q.MTPLayers)},
		{a + ".rope.dimension_sections", q.ropeSections()},
		{a + ".rope.dimension_count", uint32(q.RopeDim)},
		{a + ".expert_count", uint32(c.Experts)},
		{a + ".expert_used_count", uint32(c.ExpertsUsed)},
		{a + ".expert_feed_forward_length", uint32(c.ExpertFFN)},
		{a + ".expert_shared_feed_forward_length", uint32(q.SharedFFN)},
		{a + ".ssm.conv_kernel", uint32(q.ConvKernel)},
		{a + ".ssm.state_size", uint32(q.SSMState)},
		{a + ".ssm.group_count", uint32(q.SSMGroups)},
		{a + ".ssm.time_step_rank", uint32(q.SSMHeads)},
		{a + ".ssm.inner_size", uint32(q.SSMHeads * q.SSMState)},
		{a + ".full_attention_interval", uint32(q.FullAttnInterval)},
	}
	if c.Type != tensor.F32 && c.Type != tensor.F16 {
		kv = append(kv, struct {
			k string
			v any
		}{"general.quantization_version", uint32(2)})
	}
	return kv
}

// blockCount is the GGUF block_count: the decoder layers plus, for
// qwen35moe, the MTP blocks.
func (c *SynthConfig) blockCount() int {
	if c.Arch == "qwen35moe" {
		return c.Layers + c.MTPLayers
	}
	return c.Layers
}

// ropeBase is Qwen3's 1e6, or Qwen3.5's 1e7.
func (c *SynthConfig) ropeBase() float32 {
	if c.Arch == "qwen35moe" {
		return 1e7
	}
	return 1e6
}

// fileType is llama.cpp's general.file_type for a model of mostly typ
// (LLAMA_FTYPE_ALL_F32, MOSTLY_F16, MOSTLY_Q8_0, MOSTLY_Q4_K_M).
func fileType(typ tensor.Type) uint32 {
	switch typ {
	case tensor.F16:
		return 1
	case tensor.Q8_0:
		return 7
	case tensor.Q4_K:
		return 15
	}
	return 0
}

// tensorsQwen35 lists a qwen35moe model's tensors in the converter's order
// (the golden fixture's): per layer the norms, the mixer (gated attention
// or Gated DeltaNet), the routed and the shared expert; MTP blocks get
// the nextn tensors around a full-attention block. Scales follow the
// fixture's recipe at any width (README "Weight generation").
func (c *SynthConfig) tensorsQwen35() []synthTensor {
	q := c.Qwen35
	H, hd, E, F, SF := c.Hidden, c.HeadDim, c.Experts, c.ExpertFFN, q.SharedFFN
	key, val := q.SSMGroups*q.SSMState, q.SSMHeads*q.SSMState
	u := func(xs ...int) []uint64 {
		out := make([]uint64, len(xs))
		for i, x := range xs {
			out[i] = uint64(x)
		}
		return out
	}
	inv := func(n int) float64 { return 1 / math.Sqrt(float64(n)) }
	norm := func(name string, n int) synthTensor {
		return synthTensor{name: name, typ: tensor.F32, dims: u(n), std: 0.1, mean: 1}
	}
	mat := func(name string, cols, rows int, std float64) synthTensor {
		return synthTensor{name: name, typ: c.matType(cols), dims: u(cols, rows), std: std}
	}
	attn := func(p string) []synthTensor {
		qd, kvd := c.Heads*hd, c.KVHeads*hd
		return []synthTensor{
			mat(p+"attn_q.weight", H, 2*qd, inv(H)), // query and output gate, per head
			mat(p+"attn_k.weight", H, kvd, inv(H)),
			mat(p+"attn_v.weight", H, kvd, inv(H)),
			mat(p+"attn_output.weight", qd, H, 0.5*inv(qd)),
			norm(p+"attn_q_norm.weight", hd),
			norm(p+"attn_k_norm.weight", hd),
		}
	}
	moe := func(p string) []synthTensor {
		return []synthTensor{
			{name: p + "ffn_gate_inp.weight", typ: tensor.F32, dims: u(H, E), std: 2 * inv(H)},
			{name: p + "ffn_gate_exps.weight", typ: c.matType(H), dims: u(H, F, E), std: inv(H)},
			{name: p + "ffn_up_exps.weight", typ: c.matType(H), dims: u(H, F, E), std: inv(H)},
			{name: p + "ffn_down_exps.weight", typ: c.matType(F), dims: u(F, H, E), std: 0.5 * inv(F)},
			{name: p + "ffn_gate_inp_shexp.weight", typ: tensor.F32, dims: u(H, 1), std: 2 * inv(H)},
			mat(p+"ffn_gate_shexp.weight", H, SF, inv(H)),
			mat(p+"ffn_up_shexp.weight", H, SF, inv(H)),
			mat(p+"ffn_down_shexp.weight", SF, H, 0.5*inv(SF)),
		}
	}
	ts := []synthTensor{{name: "token_embd.weight", typ: c.matType(H), dims: u(H, c.Vocab), std: 1}}
	for l := range c.Layers {
		p := fmt.Sprintf("blk.%d.", l)
		ts = append(ts, norm(p+"attn_norm.weight", H))
		if IsFullAttention(l, q.FullAttnInterval) {
			ts = append(ts, attn(p)...)
		} else {
			ts = append(ts,
				mat(p+"attn_qkv.weight", H, 2*key+val, inv(H)),
				mat(p+"attn_gate.weight", H, val, inv(H)),
				synthTensor{name: p + "ssm_conv1d.weight", typ: tensor.F32, dims: u(q.ConvKernel, 2*key+val), std: 0.5},
				synthTensor{name: p + "ssm_dt.bias", typ: tensor.F32, dims: u(q.SSMHeads), std: 0.5},
				synthTensor{name: p + "ssm_a", typ: tensor.F32, dims: u(q.SSMHeads), std: 0.7, mean: -1, negExp: true},
				mat(p+"ssm_beta.weight", H, q.SSMHeads, inv(H)),
				mat(p+"ssm_alpha.weight", H, q.SSMHeads, inv(H)),
				norm(p+"ssm_norm.weight", q.SSMState),
				mat(p+"ssm_out.weight", val, H, 0.5*inv(val)),
			)
		}
		ts = append(ts, norm(p+"post_attention_norm.weight", H))
		ts = append(ts, moe(p)...)
	}
	for l := c.Layers; l < c.Layers+q.MTPLayers; l++ {
		p := fmt.Sprintf("blk.%d.", l)
		ts = append(ts,
			mat(p+"nextn.eh_proj.weight", 2*H, H, inv(2*H)),
			norm(p+"nextn.enorm.weight", H),
			norm(p+"nextn.hnorm.weight", H),
			norm(p+"attn_norm.weight", H),
		)
		ts = append(ts, attn(p)...)
		ts = append(ts, norm(p+"post_attention_norm.weight", H))
		ts = append(ts, moe(p)...)
		ts = append(ts, norm(p+"nextn.shared_head_norm.weight", H))
	}
	return append(ts,
		norm("output_norm.weight", H),
		synthTensor{name: "output.weight", typ: c.matType(H), dims: u(H, c.Vocab), std: 1.6 * inv(H)},
	)
}
