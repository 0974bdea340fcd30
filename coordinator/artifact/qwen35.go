package artifact

import (
	"fmt"

	"github.com/lesfarm/lesfarm/protocol"
	"github.com/lesfarm/lesfarm/runtime/gguf"
	"github.com/lesfarm/lesfarm/runtime/packfmt"
)

// qwen35Facts checks a qwen35moe header the way the runtime's loader will
// (GGUF keys of the Gated DeltaNet geometry, every tensor of every block
// by its layer type, and the dims that tie them together) and returns the
// recurrent geometry the agent sizes the per-sequence state from. Errors
// are one line naming the key or tensor at fault, so a model that cannot
// run is known at upload, not after a multi-GB download.
func qwen35Facts(f *gguf.File) (*protocol.RecurrentFacts, error) {
	const a = "qwen35moe."
	var missing string
	get := func(key string, def int64) int64 {
		v, ok := f.Value(a + key)
		if !ok {
			if def < 0 && missing == "" {
				missing = a + key
			}
			return def
		}
		n, ok := v.Uint()
		if !ok || n > 1<<30 {
			if missing == "" {
				missing = a + key
			}
			return 0
		}
		return int64(n)
	}
	blocks, hidden := get("block_count", -1), get("embedding_length", -1)
	experts, ffn, shared := get("expert_count", -1), get("expert_feed_forward_length", -1), get("expert_shared_feed_forward_length", -1)
	kernel, state, groups, vheads, inner := get("ssm.conv_kernel", -1), get("ssm.state_size", -1), get("ssm.group_count", -1), get("ssm.time_step_rank", -1), get("ssm.inner_size", -1)
	nextn, interval := get("nextn_predict_layers", 0), get("full_attention_interval", 4)
	heads, kvHeads := get("attention.head_count", -1), get("attention.head_count_kv", -1)
	headDim := get("attention.key_length", -1)
	if missing != "" {
		return nil, fmt.Errorf("qwen35moe: metadata key %s is missing or not a count", missing)
	}
	switch {
	case blocks < 1 || blocks > 1024:
		return nil, fmt.Errorf("qwen35moe: block_count %d out of range [1, 1024]", blocks)
	case nextn >= blocks:
		return nil, fmt.Errorf("qwen35moe: nextn_predict_layers %d must be smaller than block_count %d", nextn, blocks)
	case interval < 1:
		return nil, fmt.Errorf("qwen35moe: full_attention_interval %d must be >= 1", interval)
	case kernel < 1 || kernel > 64 || state < 1 || groups < 1 || vheads < 1 || state > 4096 || groups > 4096 || vheads > 4096:
		return nil, fmt.Errorf("qwen35moe: bad DeltaNet geometry: ssm.conv_kernel %d, ssm.state_size %d, ssm.group_count %d, ssm.time_step_rank %d", kernel, state, groups, vheads)
	case vheads%groups != 0:
		return nil, fmt.Errorf("qwen35moe: ssm.time_step_rank %d (v heads) must be a multiple of ssm.group_count %d (k heads)", vheads, groups)
	case inner != vheads*state:
		return nil, fmt.Errorf("qwen35moe: ssm.inner_size %d / ssm.time_step_rank %d gives a v head size of %g, which must equal ssm.state_size %d", inner, vheads, float64(inner)/float64(vheads), state)
	}
	conv := 2*groups*state + inner
	decoder := blocks - nextn
	dims := func(name string, want ...int64) error {
		t, ok := f.Tensor(name)
		if !ok {
			return fmt.Errorf("qwen35moe: tensor %s is missing", name)
		}
		ok = len(t.Dims) == len(want)
		for i := 0; ok && i < len(want); i++ {
			ok = want[i] < 0 || t.Dims[i] == uint64(want[i])
		}
		if !ok {
			return fmt.Errorf("qwen35moe: tensor %s has dims %v, want %v (-1: any)", name, t.Dims, want)
		}
		return nil
	}
	// A blob-packed file (lesfarm pack) holds the routed experts as
	// per-expert blobs, which its les.pack metadata must describe.
	blob := packfmt.IsPacked(f)
	if blob {
		if _, err := packfmt.Blobs(f, int(blocks)); err != nil {
			return nil, fmt.Errorf("qwen35moe: %w", err)
		}
	}
	rec := &protocol.RecurrentFacts{ConvKernel: int(kernel), ConvChannels: int(conv), Heads: int(vheads), StateSize: int(state)}
	for l := range blocks {
		p := fmt.Sprintf("blk.%d.", l)
		type want struct {
			name string
			dims []int64
		}
		ws := []want{
			{p + "attn_norm.weight", []int64{hidden}},
			{p + "post_attention_norm.weight", []int64{hidden}},
			{p + "ffn_gate_inp.weight", []int64{hidden, experts}},
			{p + "ffn_gate_shexp.weight", []int64{hidden, shared}},
			{p + "ffn_up_shexp.weight", []int64{hidden, shared}},
			{p + "ffn_down_shexp.weight", []int64{shared, hidden}},
		}
		switch _, merged := f.Tensor(p + "ffn_gate_up_exps.weight"); {
		case blob:
		case merged:
			ws = append(ws, want{p + "ffn_gate_up_exps.weight", []int64{hidden, 2 * ffn, experts}}, want{p + "ffn_down_exps.weight", []int64{ffn, hidden, experts}})
		default:
			ws = append(ws, want{p + "ffn_gate_exps.weight", []int64{hidden, ffn, experts}}, want{p + "ffn_up_exps.weight", []int64{hidden, ffn, experts}},
				want{p + "ffn_down_exps.weight", []int64{ffn, hidden, experts}})
		}
		if t, ok := f.Tensor(p + "ffn_gate_inp_shexp.weight"); ok && len(t.Dims) == 2 {
			ws = append(ws, want{p + "ffn_gate_inp_shexp.weight", []int64{hidden, 1}})
		} else {
			ws = append(ws, want{p + "ffn_gate_inp_shexp.weight", []int64{hidden}})
		}
		if l >= decoder || (l+1)%interval == 0 { // gated full attention (and every MTP block)
			ws = append(ws,
				want{p + "attn_q.weight", []int64{hidden, 2 * heads * headDim}},
				want{p + "attn_k.weight", []int64{hidden, kvHeads * headDim}},
				want{p + "attn_v.weight", []int64{hidden, -1}},
				want{p + "attn_output.weight", []int64{heads * headDim, hidden}},
				want{p + "attn_q_norm.weight", []int64{headDim}},
				want{p + "attn_k_norm.weight", []int64{headDim}},
			)
		} else {
			rec.Layers++
			ws = append(ws,
				want{p + "attn_qkv.weight", []int64{hidden, conv}},
				want{p + "attn_gate.weight", []int64{hidden, inner}},
				want{p + "ssm_conv1d.weight", []int64{kernel, conv}},
				want{p + "ssm_dt.bias", []int64{vheads}},
				want{p + "ssm_a", []int64{vheads}},
				want{p + "ssm_beta.weight", []int64{hidden, vheads}},
				want{p + "ssm_alpha.weight", []int64{hidden, vheads}},
				want{p + "ssm_norm.weight", []int64{state}},
				want{p + "ssm_out.weight", []int64{inner, hidden}},
			)
		}
		if l >= decoder {
			ws = append(ws, want{p + "nextn.eh_proj.weight", []int64{2 * hidden, hidden}}, want{p + "nextn.enorm.weight", []int64{hidden}}, want{p + "nextn.hnorm.weight", []int64{hidden}})
		}
		for _, w := range ws {
			if err := dims(w.name, w.dims...); err != nil {
				return nil, err
			}
		}
	}
	if rec.Layers == 0 {
		return nil, nil
	}
	return rec, nil
}
