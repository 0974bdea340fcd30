package model

import "github.com/lesfarm/lesfarm/runtime/tensor"

// weightMatrix returns the qwen35moe matrices of block li that the shared
// Layer does not hold (DeltaNet, shared expert), and every matrix of the
// NextN block.
func (a *qwen35moe) weightMatrix(li int, suffix string) *tensor.Matrix {
	var hl *hybridLayer
	switch {
	case li < len(a.layers):
		hl = &a.layers[li]
	case a.mtp != nil && li == a.mtp.index:
		if suffix == "nextn.eh_proj.weight" {
			return &a.mtp.EhProj
		}
		if w := layerMatrix(&a.mtp.layer, suffix); w != nil {
			return w
		}
		hl = &a.mtp.hl
	default:
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
