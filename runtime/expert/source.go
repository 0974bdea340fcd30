package expert

import (
	"fmt"

	"github.com/lesfarm/lesfarm/runtime/gguf"
	"github.com/lesfarm/lesfarm/runtime/moe"
	"github.com/lesfarm/lesfarm/runtime/pack"
)

// LayoutFromGGUF finds every expert's gate, up and down data in f: one blob
// per expert in a packed file (lesfarm pack), or slices of the stacked
// blk.L.ffn_*_exps tensors otherwise. Layers whose shape has no experts get
// an empty entry.
func LayoutFromGGUF(f *gguf.File, shapes []moe.LayerShape) (Layout, error) {
	lay := Layout{Experts: make([][][3]Extent, len(shapes))}
	if pack.IsPacked(f) {
		blobs, err := pack.Blobs(f, len(shapes))
		if err != nil {
			return Layout{}, fmt.Errorf("expert: %w", err)
		}
		lay.Packed = true
		for l, sh := range shapes {
			if sh.Experts == 0 {
				continue
			}
			b := blobs[l]
			if b == nil || b.Experts != sh.Experts {
				return Layout{}, fmt.Errorf("expert: packed file lacks the %d experts of layer %d", sh.Experts, l)
			}
			lay.Experts[l] = make([][3]Extent, sh.Experts)
			for e := range sh.Experts {
				base := f.DataOffset + b.Offset + int64(e)*b.Stride
				for i := range 3 {
					lay.Experts[l][e][i] = Extent{Off: base + b.Parts[i][0], Len: b.Parts[i][1]}
				}
			}
		}
		return lay, nil
	}
	for l, sh := range shapes {
		if sh.Experts == 0 {
			continue
		}
		lay.Experts[l] = make([][3]Extent, sh.Experts)
		// A merged gate+up tensor (llama.cpp's ffn_gate_up_exps; pack
		// --layout compat writes it for qwen35moe) holds each expert's
		// gate rows and then its up rows: two adjacent extents that
		// planRead reads with one pread, plus one for down.
		if t, ok := f.Tensor(pack.MergedName(l)); ok {
			if t.Size%int64(2*sh.Experts) != 0 {
				return Layout{}, fmt.Errorf("expert: tensor %s: %d bytes do not split into gate and up of %d experts", t.Name, t.Size, sh.Experts)
			}
			sz := t.Size / int64(sh.Experts)
			for e := range sh.Experts {
				base := f.TensorOffset(t) + int64(e)*sz
				lay.Experts[l][e][0] = Extent{Off: base, Len: sz / 2}
				lay.Experts[l][e][1] = Extent{Off: base + sz/2, Len: sz / 2}
			}
			if err := stackedPart(f, l, 2, sh, lay.Experts[l]); err != nil {
				return Layout{}, err
			}
			continue
		}
		for i := range 3 {
			if err := stackedPart(f, l, i, sh, lay.Experts[l]); err != nil {
				return Layout{}, err
			}
		}
	}
	return lay, nil
}

// stackedPart fills part i of every expert of layer l from its stacked
// tensor.
func stackedPart(f *gguf.File, l, i int, sh moe.LayerShape, exps [][3]Extent) error {
	name := pack.StackedName(l, i)
	t, ok := f.Tensor(name)
	if !ok {
		return fmt.Errorf("expert: tensor %s is missing", name)
	}
	if t.Size%int64(sh.Experts) != 0 {
		return fmt.Errorf("expert: tensor %s: %d bytes do not split into %d experts", name, t.Size, sh.Experts)
	}
	sz := t.Size / int64(sh.Experts)
	for e := range sh.Experts {
		exps[e][i] = Extent{Off: f.TensorOffset(t) + int64(e)*sz, Len: sz}
	}
	return nil
}

// Open builds a Store for a model being loaded: f is the model's GGUF file
// at path, shapes its expert shapes. f may be packed (lesfarm pack; the
// model loader binds packed files directly), and then each expert is one
// read of its blob. When expertsPath is set, experts are
// read from that file instead (e.g. the packed form of the model, whose
// non-expert weights the model loads from path); its expert shapes must
// match. When opts.PredictK is 0 it defaults to DefaultPredictK of the
// model's experts per token.
func Open(path string, f *gguf.File, shapes []moe.LayerShape, expertsPath string, opts Options) (*Store, error) {
	if opts.PredictK == 0 {
		if arch, err := f.String("general.architecture"); err == nil {
			if k, err := f.Uint(arch + ".expert_used_count"); err == nil && k > 0 && k <= 1024 {
				opts.PredictK = DefaultPredictK(int(k))
			}
		}
	}
	src := f
	if opts.DeviceTime && opts.Costs == nil {
		opts.Costs = CostsFromGGUF(f, len(shapes))
	}
	if expertsPath != "" {
		g, err := gguf.Open(expertsPath)
		if err != nil {
			return nil, fmt.Errorf("expert: experts file: %w", err)
		}
		defer g.Close()
		src, path = g, expertsPath
	}
	lay, err := LayoutFromGGUF(src, shapes)
	if err != nil {
		return nil, fmt.Errorf("%w (%s)", err, path)
	}
	if expertsPath != "" {
		if err := checkSameExperts(f, src, shapes, lay.Packed); err != nil {
			return nil, err
		}
	}
	s, err := New(path, lay, shapes, opts)
	if err != nil {
		return nil, err
	}
	s.model = TraceModelOf(f, shapes)
	return s, nil
}

// checkSameExperts verifies that the experts file holds experts of the
// model's types and sizes, so a mismatched companion fails loudly.
func checkSameExperts(model, exp *gguf.File, shapes []moe.LayerShape, packed bool) error {
	modelPacked := pack.IsPacked(model)
	for l, sh := range shapes {
		if sh.Experts == 0 {
			continue
		}
		for i := range 3 {
			mt, mrows, ok := expertPartInfo(model, l, i, modelPacked)
			if !ok {
				continue
			}
			et, erows, ok := expertPartInfo(exp, l, i, packed)
			if !ok || et.Type != mt.Type || len(et.Dims) < 2 || et.Dims[0] != mt.Dims[0] || erows != mrows {
				return fmt.Errorf("expert: the experts file does not match the model at %s", pack.StackedName(l, i))
			}
		}
	}
	return nil
}

// expertPartInfo returns the tensor holding part i of layer l's experts in
// f (expert 0's tensor in a packed file, the stacked or merged tensor
// otherwise) and the part's rows per expert.
func expertPartInfo(f *gguf.File, l, i int, packed bool) (*gguf.TensorInfo, uint64, bool) {
	if packed {
		t, ok := f.Tensor(pack.ExpertName(l, 0, i))
		if !ok || len(t.Dims) < 2 {
			return nil, 0, false
		}
		return t, t.Dims[1], true
	}
	if i < 2 {
		if t, ok := f.Tensor(pack.MergedName(l)); ok && len(t.Dims) >= 2 {
			return t, t.Dims[1] / 2, true
		}
	}
	t, ok := f.Tensor(pack.StackedName(l, i))
	if !ok || len(t.Dims) < 2 {
		return nil, 0, false
	}
	return t, t.Dims[1], true
}
