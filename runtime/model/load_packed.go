package model

import (
	"fmt"
	"strings"

	"github.com/lesfarm/lesfarm/runtime/moe"
	"github.com/lesfarm/lesfarm/runtime/pack"
	"github.com/lesfarm/lesfarm/runtime/tensor"
)

// A packed file (written by lesfarm pack, recognised by les.pack.version)
// holds each expert as three 2-D tensors blk.L.ffn_{gate,up,down}.E.weight
// inside one page-aligned blob instead of the stacked
// blk.L.ffn_*_exps.weight. The helpers below bind those tensors; the rest
// of the model is bound exactly as for an unpacked file.

// packedBlobs reads and checks the blob layout of a packed MoE file, or
// returns nil for an unpacked one.
func (b *binder) packedBlobs(cfg Config) []*pack.Blob {
	if b.err != nil || !pack.IsPacked(b.f) {
		return nil
	}
	blobs, err := pack.Blobs(b.f, cfg.Layers)
	if err != nil {
		hint := "; re-run lesfarm pack on the original model"
		if strings.Contains(err.Error(), "lesfarm pack") {
			hint = ""
		}
		b.fail("packed file has inconsistent les.pack metadata: %v%s", err, hint)
		return nil
	}
	return blobs
}

// packedExpertTypes checks that layer's blob covers every expert and that
// each expert's gate, up and down tensors have the layer's dims and one
// type per part, and returns those types.
func (b *binder) packedExpertTypes(blobs []*pack.Blob, layer int, cfg Config) [3]tensor.Type {
	var types [3]tensor.Type
	if b.err != nil {
		return types
	}
	blob := blobs[layer]
	switch {
	case blob == nil:
		b.fail("packed file has no expert blobs for layer %d (%s lacks it); re-run lesfarm pack on the original model", layer, pack.KeyLayers)
		return types
	case blob.Experts != cfg.ExpertCount:
		b.fail("packed file: %s%d%s = %d but the model has %d experts per layer; re-run lesfarm pack on the original model",
			pack.KeyLayerPrefix, layer, pack.SuffixExperts, blob.Experts, cfg.ExpertCount)
		return types
	}
	dims := [3][2]int{{cfg.Hidden, cfg.ExpertFFN}, {cfg.Hidden, cfg.ExpertFFN}, {cfg.ExpertFFN, cfg.Hidden}}
	for e := range cfg.ExpertCount {
		for i := range 3 {
			name := pack.ExpertName(layer, e, i)
			t, ok := b.info(name, dims[i][0], dims[i][1])
			if !ok {
				return types
			}
			if e == 0 {
				types[i] = b.checkKernel(name, t.Type, dims[i][0])
				continue
			}
			if t.Type != types[i] {
				b.fail("tensor %s has type %s but %s has %s; the experts of a layer must share a type per part",
					name, t.Type, pack.ExpertName(layer, 0, i), types[i])
				return types
			}
		}
	}
	return types
}

// checkKernel fails unless typ has a matrix-vector kernel and whole rows of
// cols elements.
func (b *binder) checkKernel(name string, typ tensor.Type, cols int) tensor.Type {
	if !tensor.CanMatVec(typ) {
		b.fail("tensor %s has type %s, which has no kernel; re-quantize the model to F32, F16, BF16, Q8_0, Q4_0, Q5_0, Q4_K, Q5_K or Q6_K", name, typ)
		return 0
	}
	if _, err := typ.RowSize(cols); err != nil {
		b.fail("tensor %s: %v", name, err)
	}
	return typ
}

// packedResident reads every expert of a packed layer into one slab of
// exactly shape.Experts × shape.Bytes() bytes (the blobs' alignment padding
// is not kept), so a packed model costs the same RAM as the unpacked one.
func (b *binder) packedResident(layer int, shape moe.LayerShape) ([]moe.Weights, error) {
	per := shape.Bytes()
	slab := residentBytes(int64(shape.Experts) * per)
	out := make([]moe.Weights, shape.Experts)
	ra := b.f.ReaderAt()
	for e := range shape.Experts {
		var parts [3][]byte
		off := int64(e) * per
		for i := range 3 {
			name := pack.ExpertName(layer, e, i)
			t, ok := b.f.Tensor(name)
			if !ok { // checked by packedExpertTypes
				return nil, fmt.Errorf("tensor %s is missing", name)
			}
			if off+t.Size > int64(e+1)*per {
				return nil, fmt.Errorf("tensor %s: %d bytes exceed the expert size %d of layer %d", name, t.Size, per, layer)
			}
			buf := slab[off : off+t.Size : off+t.Size]
			if n, err := ra.ReadAt(buf, b.f.TensorOffset(t)); n < len(buf) {
				return nil, fmt.Errorf("read %s: %w", name, err)
			}
			parts[i] = buf
			off += t.Size
		}
		out[e] = moe.Weights{Gate: parts[0], Up: parts[1], Down: parts[2]}
	}
	return out, nil
}
