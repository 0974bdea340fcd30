package model

import (
	"strconv"
	"strings"

	"github.com/lesfarm/lesfarm/runtime/tensor"
)

// WeightMatrix returns the loaded matrix bound to the GGUF tensor name, so
// that a tool can swap its weights in place between forward passes (the
// mixed-precision planner measures a part at another type this way). It
// returns nil for names that are not bound to a Matrix: expert stacks
// (reached through the Source), vectors, the conv taps, and unknown names.
// It covers qwen3, qwen3moe and qwen35moe, including the NextN block.
// Swapping is not safe while a State of the model runs.
func (m *Model) WeightMatrix(name string) *tensor.Matrix {
	switch name {
	case "token_embd.weight":
		return &m.Embed
	case "output.weight":
		return &m.Output
	}
	rest, ok := strings.CutPrefix(name, "blk.")
	if !ok {
		return nil
	}
	num, suffix, ok := strings.Cut(rest, ".")
	if !ok {
		return nil
	}
	li, err := strconv.Atoi(num)
	if err != nil || li < 0 {
		return nil
	}
	var L *Layer
	var hl *hybridLayer
	switch {
	case li < len(m.Layers):
		L = &m.Layers[li]
		if m.hybrid != nil && li < len(m.hybrid.layers) {
			hl = &m.hybrid.layers[li]
		}
	case m.hybrid != nil && m.hybrid.mtp != nil && li == m.hybrid.mtp.index:
		mt := m.hybrid.mtp
		if suffix == "nextn.eh_proj.weight" {
			return &mt.EhProj
		}
		L, hl = &mt.layer, &mt.hl
	default:
		return nil
	}
	switch suffix {
	case "attn_q.weight":
		return &L.Q
	case "attn_k.weight":
		return &L.K
	case "attn_v.weight":
		return &L.V
	case "attn_output.weight":
		return &L.O
	case "ffn_gate.weight":
		return L.Gate
	case "ffn_up.weight":
		return L.Up
	case "ffn_down.weight":
		return L.Down
	}
	if hl == nil {
		return nil
	}
	switch suffix {
	case "attn_qkv.weight":
		return &hl.QKV
	case "attn_gate.weight":
		return &hl.Z
	case "ssm_beta.weight":
		return &hl.Beta
	case "ssm_alpha.weight":
		return &hl.Alpha
	case "ssm_out.weight":
		return &hl.Out
	case "ffn_gate_shexp.weight":
		return &hl.ShGate
	case "ffn_up_shexp.weight":
		return &hl.ShUp
	case "ffn_down_shexp.weight":
		return &hl.ShDown
	}
	return nil
}
