// Package pack rewrites a GGUF Mixture-of-Experts model so that each
// (layer, expert)'s gate, up and down weights lie next to each other in one
// page-aligned blob: the LES expert store then fetches an expert with a
// single pread.
//
// The packed file is an ordinary GGUF v3 file with general.alignment 4096.
// Non-expert tensors keep their names and data. Each stacked expert tensor
// blk.L.ffn_{gate,up,down}_exps.weight (dims [cols, rows, E]) is replaced by
// E per-expert 2-D tensors blk.L.ffn_{gate,up,down}.E.weight (dims [cols,
// rows]), written gate, up, down for expert 0, then expert 1, and so on.
// Metadata keys under les.pack.* describe the blobs (see the Key constants),
// so a reader can find blob e of layer L at
// data_offset + les.pack.blk.L.offset + e × les.pack.blk.L.stride and read
// les.pack.blk.L.size bytes.
package pack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/lesfarm/lesfarm/runtime/gguf"
	"github.com/lesfarm/lesfarm/runtime/packfmt"
	"github.com/lesfarm/lesfarm/runtime/tensor"
)

// Alignment is the page alignment of packed blobs (and of every tensor in a
// packed file).
const Alignment = 4096

// Version is the pack format version written to KeyVersion.
const Version = packfmt.Version

// Metadata keys of a packed file (defined, with the layout they describe,
// in package packfmt, which header readers use without this package's
// kernels). Per-layer keys use the prefix "les.pack.blk.L." with L the
// layer index.
const (
	KeyVersion     = packfmt.KeyVersion
	KeyAlignment   = packfmt.KeyAlignment
	KeySource      = packfmt.KeySource
	KeyLayers      = packfmt.KeyLayers
	KeyLayerPrefix = packfmt.KeyLayerPrefix
	SuffixOffset   = packfmt.SuffixOffset
	SuffixStride   = packfmt.SuffixStride
	SuffixSize     = packfmt.SuffixSize
	SuffixExperts  = packfmt.SuffixExperts
	SuffixParts    = packfmt.SuffixParts
)

// Parts of an expert, in blob order.
var partNames = packfmt.PartNames

// StackedName returns the name of layer's stacked expert tensor for part
// (0 gate, 1 up, 2 down) in an unpacked GGUF.
func StackedName(layer, part int) string {
	return fmt.Sprintf("blk.%d.ffn_%s_exps.weight", layer, partNames[part])
}

// ExpertName returns the name of one expert's tensor for part in a packed
// GGUF.
func ExpertName(layer, expert, part int) string { return packfmt.ExpertName(layer, expert, part) }

// IsPacked reports whether f was written by Pack in the blob layout (one
// blob of per-expert tensors per expert). A compat-layout file (IsCompat)
// keeps llama.cpp's stacked tensors and is read like an unpacked one.
func IsPacked(f *gguf.File) bool { return packfmt.IsPacked(f) }

// Blob is where one layer's expert blobs lie (offsets relative to the data
// section).
type Blob = packfmt.Blob

// Blobs returns the blob layout of each layer of a packed file (nil entries
// for layers without experts), checked against the tensor infos.
func Blobs(f *gguf.File, layers int) ([]*Blob, error) { return packfmt.Blobs(f, layers) }

// Layouts of a packed file (Options.Layout).
const (
	// LayoutBlob (the default) makes each expert one page-aligned blob of
	// per-expert tensors: one read per expert, but a file only lesfarm runs.
	LayoutBlob = "blob"
	// LayoutCompat keeps llama.cpp's stacked expert tensors (for
	// qwen35moe the merged ffn_gate_up_exps plus ffn_down_exps) with every
	// expert's slice of each on a page boundary: two or three aligned
	// reads per expert, in a file llama.cpp, llama-bench and Ollama load.
	// See compat.go.
	LayoutCompat = packfmt.LayoutCompat
)

// Options configures Pack.
type Options struct {
	// Layout is LayoutBlob (default when empty) or LayoutCompat.
	Layout string
	// GateUp chooses, for LayoutCompat, how gate and up are stored:
	// GateUpMerged, GateUpSplit, or GateUpAuto (default when empty):
	// merged for architectures whose llama.cpp loader accepts
	// ffn_gate_up_exps (MergedArchs), else split.
	GateUp string
	// NoPad, for LayoutCompat, keeps the expert FFN width even when its
	// slices then miss page boundaries (reads are then widened to pages).
	NoPad bool

	// Progress, if set, is called with the bytes of tensor data written so
	// far and the total.
	Progress func(done, total int64)
}

// Pack rewrites the GGUF at in into out (a new file; replaced if it
// exists). It returns an error for a file that has no stacked expert
// tensors or is already packed.
func Pack(ctx context.Context, in, out string, opts Options) error {
	f, err := gguf.Open(in)
	if err != nil {
		return fmt.Errorf("pack: %w", err)
	}
	defer f.Close()
	if IsPacked(f) {
		return fmt.Errorf("pack: %s is already packed", in)
	}
	if ai, _ := filepath.Abs(in); func() bool { ao, _ := filepath.Abs(out); return ai == ao }() {
		return errors.New("pack: output must differ from the input")
	}

	// Find the stacked (or merged gate+up) expert tensors per layer.
	layers, stacked, err := ExpertLayers(f)
	if err != nil {
		return err
	}
	if len(layers) == 0 {
		return fmt.Errorf("pack: %s has no stacked expert tensors (blk.N.ffn_gate_exps.weight); nothing to pack", in)
	}
	if opts.Layout == LayoutCompat {
		return packCompat(ctx, f, in, out, layers, stacked, opts)
	} else if opts.Layout != "" && opts.Layout != LayoutBlob {
		return fmt.Errorf("pack: unknown layout %q (want %s or %s)", opts.Layout, LayoutBlob, LayoutCompat)
	}
	byLayer := map[int]*ExpertLayer{}
	for _, le := range layers {
		byLayer[le.Layer] = le
	}

	// Write to a temporary file next to out, then rename, so a failed or
	// interrupted pack never leaves a truncated model under the final name.
	dst, err := gguf.CreateOutput(out)
	if err != nil {
		return fmt.Errorf("pack: %w", err)
	}
	defer dst.Close()
	w := gguf.NewWriter(dst)
	// Metadata: everything but the alignment (ours is 4096) and any
	// earlier pack keys.
	for _, kv := range f.KVs() {
		if kv.Key == "general.alignment" || strings.HasPrefix(kv.Key, "les.pack.") {
			continue
		}
		if err := w.AddKV(kv.Key, kv.Value); err != nil {
			return fmt.Errorf("pack: %w", err)
		}
	}
	if err := w.AddKV("general.alignment", uint32(Alignment)); err != nil {
		return fmt.Errorf("pack: %w", err)
	}

	// Tensors: the stacked ones of a layer are replaced, where the first
	// of them stood, by the per-expert tensors.
	type src struct {
		name string
		t    *gguf.TensorInfo
		off  int64 // byte offset within t
		size int64
	}
	var order []src
	var offs []int64
	var off int64
	add := func(name string, typ tensor.Type, dims []uint64, s src) error {
		if err := w.AddTensor(name, typ, dims); err != nil {
			return fmt.Errorf("pack: %w", err)
		}
		off = alignUp(off, Alignment)
		offs = append(offs, off)
		off += s.size
		order = append(order, s)
		return nil
	}
	done := map[int]bool{}
	blobs := map[int]*Blob{}
	for _, t := range f.Tensors() {
		if !stacked[t.Name] {
			if err := add(t.Name, t.Type, t.Dims, src{name: t.Name, t: t, size: t.Size}); err != nil {
				return err
			}
			continue
		}
		l, _, _ := parseExpertName(t.Name)
		if done[l] {
			continue
		}
		done[l] = true
		le := byLayer[l]
		b := &Blob{Experts: le.Experts}
		dims := [3][]uint64{{uint64(le.Hidden), uint64(le.FFN)}, {uint64(le.Hidden), uint64(le.FFN)}, {uint64(le.FFN), uint64(le.Hidden)}}
		for e := range le.Experts {
			for i := range 3 {
				pt, po, sz := le.Part(e, i)
				name := ExpertName(l, e, i)
				if err := add(name, pt.Type, dims[i], src{name: name, t: pt, off: po, size: sz}); err != nil {
					return err
				}
				o := offs[len(offs)-1]
				switch {
				case e == 0 && i == 0:
					b.Offset = o
				case e == 1 && i == 0:
					b.Stride = o - b.Offset
				}
				if e == 0 {
					b.Parts[i] = [2]int64{o - b.Offset, sz}
				}
			}
		}
		b.Size = b.Parts[2][0] + b.Parts[2][1]
		if le.Experts == 1 {
			b.Stride = alignUp(b.Size, Alignment)
		}
		blobs[l] = b
	}
	var total int64
	for _, s := range order {
		total += s.size
	}
	var layerIDs []int32
	for _, le := range layers {
		b := blobs[le.Layer]
		p := KeyLayerPrefix + strconv.Itoa(le.Layer)
		layerIDs = append(layerIDs, int32(le.Layer))
		for _, kv := range []struct {
			k string
			v any
		}{
			{p + SuffixOffset, uint64(b.Offset)}, {p + SuffixStride, uint64(b.Stride)}, {p + SuffixSize, uint64(b.Size)},
			{p + SuffixExperts, uint32(b.Experts)},
			{p + SuffixParts, []int64{b.Parts[0][0], b.Parts[0][1], b.Parts[1][0], b.Parts[1][1], b.Parts[2][0], b.Parts[2][1]}},
		} {
			if err := w.AddKV(kv.k, kv.v); err != nil {
				return fmt.Errorf("pack: %w", err)
			}
		}
	}
	for _, kv := range []struct {
		k string
		v any
	}{{KeyVersion, uint32(Version)}, {KeyAlignment, uint32(Alignment)}, {KeySource, filepath.Base(in)}, {KeyLayers, layerIDs}} {
		if err := w.AddKV(kv.k, kv.v); err != nil {
			return fmt.Errorf("pack: %w", err)
		}
	}

	if err := w.WriteHeader(); err != nil {
		return fmt.Errorf("pack: %w", err)
	}
	ra := f.ReaderAt()
	var written int64
	for i, s := range order {
		if err := ctx.Err(); err != nil {
			return err
		}
		base := f.TensorOffset(s.t) + s.off
		if err := w.WriteTensorData(s.name, io.NewSectionReader(ra, base, s.size)); err != nil {
			return fmt.Errorf("pack: %w", err)
		}
		if got, _ := w.TensorOffset(s.name); got != offs[i] {
			return fmt.Errorf("pack: internal error: tensor %s written at %d, planned %d", s.name, got, offs[i])
		}
		written += s.size
		if opts.Progress != nil {
			opts.Progress(written, total)
		}
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("pack: %w", err)
	}
	if err := dst.Commit(); err != nil {
		return fmt.Errorf("pack: %w", err)
	}
	return nil
}

// parseStacked recognises blk.L.ffn_{gate,up,down}_exps.weight.
func parseStacked(name string) (layer, part int, ok bool) {
	rest, found := strings.CutPrefix(name, "blk.")
	if !found {
		return 0, 0, false
	}
	num, rest, found := strings.Cut(rest, ".")
	if !found {
		return 0, 0, false
	}
	l, err := strconv.Atoi(num)
	if err != nil || l < 0 {
		return 0, 0, false
	}
	for i, p := range partNames {
		if rest == "ffn_"+p+"_exps.weight" {
			return l, i, true
		}
	}
	return 0, 0, false
}

func alignUp(n, a int64) int64 { return (n + a - 1) / a * a }
