package model

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/lesfarm/lesfarm/runtime/gguf"
	"github.com/lesfarm/lesfarm/runtime/tensor"
)

// tinyQwen35 describes a small random-weight qwen35moe model the tests
// write themselves, so the architecture's guarantees (rollback, LES
// exactness, bad input) run in a fresh clone without ../shared. Its layout
// is the shared fixture's (README's tensor list), at a smaller size.
type tinyQwen35 struct {
	Layers, Experts, Used, Hidden, FFN, SharedFFN, Vocab int
	Heads, KVHeads, HeadDim, RopeDim                     int
	KHeads, VHeads, StateDim, Conv, Interval, NextN      int
	Type                                                 tensor.Type // matrices; norms, conv, router, gates stay F32
	Seed                                                 uint64
	// Mutate, if set, edits the key/value list and tensor list before
	// writing (bad-input tests).
	Mutate func(kv map[string]any, ts *[]synthTensor)
}

func defaultTinyQwen35(typ tensor.Type) tinyQwen35 {
	return tinyQwen35{Layers: 4, Experts: 8, Used: 2, Hidden: 256, FFN: 64, SharedFFN: 64, Vocab: 512,
		Heads: 4, KVHeads: 2, HeadDim: 64, RopeDim: 16, KHeads: 2, VHeads: 4, StateDim: 32, Conv: 4, Interval: 4, NextN: 1,
		Type: typ, Seed: 7}
}

func (c tinyQwen35) tensors() []synthTensor {
	u := func(xs ...int) []uint64 {
		out := make([]uint64, len(xs))
		for i, x := range xs {
			out[i] = uint64(x)
		}
		return out
	}
	inv := func(n int) float64 { return 1 / math.Sqrt(float64(n)) }
	sc := SynthConfig{Type: c.Type}
	mt := sc.matType
	H, F, S, E := c.Hidden, c.FFN, c.SharedFFN, c.Experts
	qd, kvd := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	inner := c.VHeads * c.StateDim
	cd := 2*c.KHeads*c.StateDim + inner
	ts := []synthTensor{{name: "token_embd.weight", typ: mt(H), dims: u(H, c.Vocab), std: 1}}
	for l := range c.Layers + c.NextN {
		p := fmt.Sprintf("blk.%d.", l)
		attn := l >= c.Layers || (l+1)%c.Interval == 0
		ts = append(ts,
			synthTensor{name: p + "attn_norm.weight", typ: tensor.F32, dims: u(H), std: 0.1, mean: 1},
			synthTensor{name: p + "post_attention_norm.weight", typ: tensor.F32, dims: u(H), std: 0.1, mean: 1})
		if attn {
			ts = append(ts,
				synthTensor{name: p + "attn_q.weight", typ: mt(H), dims: u(H, 2*qd), std: inv(H)},
				synthTensor{name: p + "attn_k.weight", typ: mt(H), dims: u(H, kvd), std: inv(H)},
				synthTensor{name: p + "attn_v.weight", typ: mt(H), dims: u(H, kvd), std: inv(H)},
				synthTensor{name: p + "attn_output.weight", typ: mt(qd), dims: u(qd, H), std: 0.5 * inv(qd)},
				synthTensor{name: p + "attn_q_norm.weight", typ: tensor.F32, dims: u(c.HeadDim), std: 0.1, mean: 1},
				synthTensor{name: p + "attn_k_norm.weight", typ: tensor.F32, dims: u(c.HeadDim), std: 0.1, mean: 1})
		} else {
			ts = append(ts,
				synthTensor{name: p + "attn_qkv.weight", typ: mt(H), dims: u(H, cd), std: inv(H)},
				synthTensor{name: p + "attn_gate.weight", typ: mt(H), dims: u(H, inner), std: inv(H)},
				synthTensor{name: p + "ssm_conv1d.weight", typ: tensor.F32, dims: u(c.Conv, cd), std: 0.5},
				synthTensor{name: p + "ssm_dt.bias", typ: tensor.F32, dims: u(c.VHeads), std: 0.5},
				synthTensor{name: p + "ssm_a", typ: tensor.F32, dims: u(c.VHeads), std: 0.1, mean: -0.4},
				synthTensor{name: p + "ssm_beta.weight", typ: mt(H), dims: u(H, c.VHeads), std: inv(H)},
				synthTensor{name: p + "ssm_alpha.weight", typ: mt(H), dims: u(H, c.VHeads), std: inv(H)},
				synthTensor{name: p + "ssm_norm.weight", typ: tensor.F32, dims: u(c.StateDim), std: 0.1, mean: 1},
				synthTensor{name: p + "ssm_out.weight", typ: mt(inner), dims: u(inner, H), std: 0.5 * inv(inner)})
		}
		ts = append(ts,
			synthTensor{name: p + "ffn_gate_inp.weight", typ: tensor.F32, dims: u(H, E), std: 2 * inv(H)},
			synthTensor{name: p + "ffn_gate_exps.weight", typ: mt(H), dims: u(H, F, E), std: inv(H)},
			synthTensor{name: p + "ffn_up_exps.weight", typ: mt(H), dims: u(H, F, E), std: inv(H)},
			synthTensor{name: p + "ffn_down_exps.weight", typ: mt(F), dims: u(F, H, E), std: 0.5 * inv(F)},
			synthTensor{name: p + "ffn_gate_inp_shexp.weight", typ: tensor.F32, dims: u(H, 1), std: 2 * inv(H)},
			synthTensor{name: p + "ffn_gate_shexp.weight", typ: mt(H), dims: u(H, S), std: inv(H)},
			synthTensor{name: p + "ffn_up_shexp.weight", typ: mt(H), dims: u(H, S), std: inv(H)},
			synthTensor{name: p + "ffn_down_shexp.weight", typ: mt(S), dims: u(S, H), std: 0.5 * inv(S)})
		if l >= c.Layers {
			ts = append(ts,
				synthTensor{name: p + "nextn.eh_proj.weight", typ: mt(2 * H), dims: u(2*H, H), std: inv(2 * H)},
				synthTensor{name: p + "nextn.enorm.weight", typ: tensor.F32, dims: u(H), std: 0.1, mean: 1},
				synthTensor{name: p + "nextn.hnorm.weight", typ: tensor.F32, dims: u(H), std: 0.1, mean: 1},
				synthTensor{name: p + "nextn.shared_head_norm.weight", typ: tensor.F32, dims: u(H), std: 0.1, mean: 1})
		}
	}
	return append(ts,
		synthTensor{name: "output_norm.weight", typ: tensor.F32, dims: u(H), std: 0.1, mean: 1},
		synthTensor{name: "output.weight", typ: mt(H), dims: u(H, c.Vocab), std: 1.6 * inv(H)})
}

// write streams the model as GGUF to w.
func (c tinyQwen35) write(w io.Writer) error {
	const a = "qwen35moe."
	kv := map[string]any{
		"general.architecture":                  "qwen35moe",
		"general.name":                          "tiny-qwen35moe-test",
		a + "block_count":                       uint32(c.Layers + c.NextN),
		a + "nextn_predict_layers":              uint32(c.NextN),
		a + "context_length":                    uint32(512),
		a + "embedding_length":                  uint32(c.Hidden),
		a + "attention.head_count":              uint32(c.Heads),
		a + "attention.head_count_kv":           uint32(c.KVHeads),
		a + "attention.key_length":              uint32(c.HeadDim),
		a + "attention.value_length":            uint32(c.HeadDim),
		a + "attention.layer_norm_rms_epsilon":  float32(1e-6),
		a + "rope.freq_base":                    float32(1e7),
		a + "rope.dimension_count":              uint32(c.RopeDim),
		a + "expert_count":                      uint32(c.Experts),
		a + "expert_used_count":                 uint32(c.Used),
		a + "expert_feed_forward_length":        uint32(c.FFN),
		a + "expert_shared_feed_forward_length": uint32(c.SharedFFN),
		a + "ssm.conv_kernel":                   uint32(c.Conv),
		a + "ssm.state_size":                    uint32(c.StateDim),
		a + "ssm.group_count":                   uint32(c.KHeads),
		a + "ssm.time_step_rank":                uint32(c.VHeads),
		a + "ssm.inner_size":                    uint32(c.VHeads * c.StateDim),
		a + "full_attention_interval":           uint32(c.Interval),
	}
	ts := c.tensors()
	if c.Mutate != nil {
		c.Mutate(kv, &ts)
	}
	gw := gguf.NewWriter(w)
	// Fixed key order: general.architecture first, the rest sorted.
	keys := []string{"general.architecture"}
	for k := range kv {
		if k != "general.architecture" {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys[1:])
	for _, k := range keys {
		if v, ok := kv[k]; ok {
			if err := gw.AddKV(k, v); err != nil {
				return err
			}
		}
	}
	tokens, merges, types, err := byteBPE(c.Vocab, c.Seed, "")
	if err != nil {
		return err
	}
	if err := addByteBPE(gw, synthVocab{tokens, merges, types}, "qwen35"); err != nil {
		return err
	}
	for _, t := range ts {
		if err := gw.AddTensor(t.name, t.typ, t.dims); err != nil {
			return err
		}
	}
	if err := gw.WriteHeader(); err != nil {
		return err
	}
	for _, t := range ts {
		size, _ := gguf.TensorSize(t.typ, t.dims)
		r := &randTensor{t: t, left: size, rng: newRNG(c.Seed, t.name)}
		if err := gw.WriteTensorData(t.name, bufio.NewReader(r)); err != nil {
			return err
		}
	}
	return gw.Close()
}

// tinyQwen35File writes c to a file in a test temp dir and returns its path.
func tinyQwen35File(t testing.TB, c tinyQwen35) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), fmt.Sprintf("tiny-qwen35moe-%s.gguf", c.Type))
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.write(f); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return p
}
