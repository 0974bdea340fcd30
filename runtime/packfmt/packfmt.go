// Package packfmt is the on-disk format of a packed GGUF (lesfarm pack),
// read from its header alone: the les.pack.* metadata keys, the layouts,
// the per-expert tensor names and the blob layout each layer's keys
// describe. It imports only runtime/gguf (itself kernel-free), so a reader
// of headers, such as the coordinator checking an upload, knows the format
// without linking the tensor kernels that package pack writes it with.
package packfmt

import (
	"fmt"
	"strconv"

	"github.com/lesfarm/lesfarm/runtime/gguf"
)

// Version is the pack format version written to KeyVersion.
const Version = 1

// Metadata keys of a packed file. Per-layer keys use the prefix
// "les.pack.blk.L." with L the layer index.
const (
	KeyVersion   = "les.pack.version"   // uint32: format version
	KeyAlignment = "les.pack.alignment" // uint32: blob alignment (4096)
	KeySource    = "les.pack.source"    // string: base name of the input file
	KeyLayers    = "les.pack.layers"    // int32 array: the layers that have packed experts
	// KeyLayout names the layout: LayoutCompat, or absent for the blob
	// layout.
	KeyLayout = "les.pack.layout"
	// Per layer: KeyLayerPrefix + L + one of the suffixes below.
	KeyLayerPrefix = "les.pack.blk."
	SuffixOffset   = ".offset"  // uint64: blob 0's offset relative to the data section
	SuffixStride   = ".stride"  // uint64: bytes from one expert's blob to the next
	SuffixSize     = ".size"    // uint64: bytes of one blob (gate start to down end)
	SuffixExperts  = ".experts" // uint32: experts in the layer
	SuffixParts    = ".parts"   // uint64 array [6]: gate, up, down (offset, size) within the blob
)

// LayoutCompat is the KeyLayout value of a file that keeps llama.cpp's
// stacked expert tensors with each expert's slices page-aligned.
const LayoutCompat = "compat"

// PartNames are the parts of an expert, in blob order.
var PartNames = [3]string{"gate", "up", "down"}

// ExpertName returns the name of one expert's tensor for part (0 gate, 1
// up, 2 down) in a packed GGUF.
func ExpertName(layer, expert, part int) string {
	return fmt.Sprintf("blk.%d.ffn_%s.%d.weight", layer, PartNames[part], expert)
}

// IsCompat reports whether f was packed with the compat layout.
func IsCompat(f *gguf.File) bool {
	s, err := f.String(KeyLayout)
	return err == nil && s == LayoutCompat
}

// IsPacked reports whether f was packed in the blob layout (one blob of
// per-expert tensors per expert). A compat-layout file (IsCompat) keeps
// llama.cpp's stacked tensors and is read like an unpacked one.
func IsPacked(f *gguf.File) bool { return f.Has(KeyVersion) && !IsCompat(f) }

// Blob is where one layer's expert blobs lie (offsets relative to the data
// section).
type Blob struct {
	Offset, Stride, Size int64
	Experts              int
	Parts                [3][2]int64 // (offset within blob, size) of gate, up, down
}

// Blobs returns the blob layout of each layer of a packed file (nil entries
// for layers without experts), checked against the tensor infos.
func Blobs(f *gguf.File, layers int) ([]*Blob, error) {
	v, err := f.Uint(KeyVersion)
	if err != nil {
		return nil, fmt.Errorf("pack: %w", err)
	}
	if v != Version {
		return nil, fmt.Errorf("pack: file has pack format version %d, this runtime reads %d; re-run lesfarm pack", v, Version)
	}
	ls, err := f.Int32s(KeyLayers)
	if err != nil {
		return nil, fmt.Errorf("pack: %w", err)
	}
	out := make([]*Blob, layers)
	for _, l := range ls {
		if l < 0 || int(l) >= layers {
			return nil, fmt.Errorf("pack: %s lists layer %d, the model has %d", KeyLayers, l, layers)
		}
		p := KeyLayerPrefix + strconv.Itoa(int(l))
		var b Blob
		var u [4]uint64
		for i, suf := range []string{SuffixOffset, SuffixStride, SuffixSize, SuffixExperts} {
			if u[i], err = f.Uint(p + suf); err != nil {
				return nil, fmt.Errorf("pack: %w", err)
			}
			if u[i] > 1<<62 {
				return nil, fmt.Errorf("pack: %s%s = %d is out of range", p, suf, u[i])
			}
		}
		b.Offset, b.Stride, b.Size, b.Experts = int64(u[0]), int64(u[1]), int64(u[2]), int(u[3])
		parts, err := f.Int64s(p + SuffixParts)
		if err != nil {
			return nil, fmt.Errorf("pack: %w", err)
		}
		if len(parts) != 6 {
			return nil, fmt.Errorf("pack: %s%s has %d values, want 6", p, SuffixParts, len(parts))
		}
		for i := range 3 {
			b.Parts[i] = [2]int64{parts[2*i], parts[2*i+1]}
		}
		// Cross-check with the tensor infos, so a hand-edited or stale
		// key cannot send reads to the wrong bytes.
		for e := range b.Experts {
			for i := range 3 {
				name := ExpertName(int(l), e, i)
				t, ok := f.Tensor(name)
				if !ok {
					return nil, fmt.Errorf("pack: packed tensor %s is missing", name)
				}
				want := b.Offset + int64(e)*b.Stride + b.Parts[i][0]
				if t.Offset != want || t.Size != b.Parts[i][1] {
					return nil, fmt.Errorf("pack: tensor %s at offset %d size %d disagrees with %s* (offset %d size %d)", name, t.Offset, t.Size, p, want, b.Parts[i][1])
				}
			}
		}
		out[l] = &b
	}
	return out, nil
}
