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
	if li < len(m.Layers) {
		if w := layerMatrix(&m.Layers[li], suffix); w != nil {
			return w
		}
	}
	return m.arch.weightMatrix(li, suffix)
}

// layerMatrix returns the matrix of the shared Layer bound to a block's
// tensor name suffix, or nil.
func layerMatrix(L *Layer, suffix string) *tensor.Matrix {
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
	return nil
}
