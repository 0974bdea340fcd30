package model

import "github.com/lesfarm/lesfarm/runtime/gguf"

func init() {
	Register("qwen3moe", func(f *gguf.File, o Options) (*Model, error) { return buildStack(f, o, "qwen3moe", true, qwen3moe{}) })
}

// qwen3moe is the Qwen3-MoE architecture: a plain transformer stack whose
// blocks end in a softmax-routed top-k mixture of SwiGLU experts, read
// through the model's moe.Source.
type qwen3moe struct{ plainStack }

// cutsVerify is true: positions of one pass are independent apart from
// attention, so State.CutVerify may drop drafted positions that would read
// experts the earlier ones do not need.
func (qwen3moe) cutsVerify() bool { return true }
