package calibrate

import (
	"fmt"
	"strings"

	"github.com/lesfarm/lesfarm/runtime/expert"
	"github.com/lesfarm/lesfarm/runtime/gguf"
)

// expertReadSize returns the bytes a store reads for one expert of the
// model's first MoE layer when the model is packed: its gate, up and down
// data (stacked ffn_*_exps tensors, or a packed file's per-expert tensors)
// rounded up to whole 4 KiB blocks, as a direct read of its blob is.
func expertReadSize(path string) (int64, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return 0, fmt.Errorf("calibrate: reference model: %w", err)
	}
	defer f.Close()
	var n int64
	for layer := 0; layer < 1024 && n == 0; layer++ {
		prefix := fmt.Sprintf("blk.%d.", layer)
		found := false
		for _, t := range f.Tensors() {
			rest, ok := strings.CutPrefix(t.Name, prefix)
			if !ok {
				continue
			}
			found = true
			switch {
			case strings.HasPrefix(rest, "ffn_gate_exps.") || strings.HasPrefix(rest, "ffn_up_exps.") || strings.HasPrefix(rest, "ffn_down_exps."):
				if len(t.Dims) == 3 && t.Dims[2] > 0 {
					n += t.Size / int64(t.Dims[2])
				}
			case rest == "ffn_gate.0.weight" || rest == "ffn_up.0.weight" || rest == "ffn_down.0.weight":
				n += t.Size
			}
		}
		if !found {
			break
		}
	}
	if n <= 0 {
		return 0, fmt.Errorf("calibrate: reference model %s has no routed experts to size the flash grid's expert read", path)
	}
	return (n + expert.DirectAlign - 1) / expert.DirectAlign * expert.DirectAlign, nil
}
