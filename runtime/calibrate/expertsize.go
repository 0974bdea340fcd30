package calibrate

import (
	"fmt"
	"strings"

	"github.com/lesfarm/lesfarm/runtime/expert"
	"github.com/lesfarm/lesfarm/runtime/gguf"
)

// expertGeometry is what the flash grid needs of a model to read as its
// store reads: the bytes of one packed expert read, the experts of a
// layer and the experts each token routes to.
type expertGeometry struct {
	read    int64
	experts int
	used    int
}

// modelGeometry returns the bytes a store reads for one expert of the
// model's first MoE layer when the model is packed: its gate, up and down
// data (stacked ffn_*_exps tensors, or a packed file's per-expert tensors)
// rounded up to whole 4 KiB blocks, as a direct read of its blob is; and
// the layer's expert count and the model's experts used per token (0 when
// the file does not say).
func modelGeometry(path string) (expertGeometry, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return expertGeometry{}, fmt.Errorf("calibrate: reference model: %w", err)
	}
	defer f.Close()
	var g expertGeometry
	var n int64
	for layer := 0; layer < 1024 && n == 0; layer++ {
		prefix := fmt.Sprintf("blk.%d.", layer)
		found := false
		packed := 0
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
					g.experts = int(t.Dims[2])
				}
			case rest == "ffn_gate.0.weight" || rest == "ffn_up.0.weight" || rest == "ffn_down.0.weight":
				n += t.Size
			}
			if strings.HasPrefix(rest, "ffn_gate.") && strings.HasSuffix(rest, ".weight") {
				packed++
			}
		}
		if n > 0 && g.experts == 0 {
			g.experts = packed
		}
		if !found {
			break
		}
	}
	if n <= 0 {
		return expertGeometry{}, fmt.Errorf("calibrate: reference model %s has no routed experts to size the flash grid's expert read", path)
	}
	if u, err := f.Uint(f.Architecture() + ".expert_used_count"); err == nil && u > 0 && u <= 1024 {
		g.used = int(u)
	}
	g.read = (n + expert.DirectAlign - 1) / expert.DirectAlign * expert.DirectAlign
	return g, nil
}
