package model

import "github.com/lesfarm/lesfarm/runtime/gguf"

func init() {
	Register("qwen3", func(f *gguf.File, o Options) (*Model, error) { return buildStack(f, o, "qwen3", false, qwen3{}) })
}

// qwen3 is the dense Qwen3 architecture (the draft models of speculative
// decoding): a plain transformer stack with a SwiGLU FFN in every block.
type qwen3 struct{ plainStack }

// cutsVerify is false: a dense model reads no experts, so there is nothing
// for State.CutVerify to save.
func (qwen3) cutsVerify() bool { return false }
