package pack

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/lesfarm/lesfarm/runtime/gguf"
	"github.com/lesfarm/lesfarm/runtime/packfmt"
	"github.com/lesfarm/lesfarm/runtime/tensor"
)

// The compat layout (Options.Layout = LayoutCompat) writes a file that
// llama.cpp, llama-bench and Ollama load unchanged, and in which the LES
// expert store still reads every expert with page-aligned preads:
//
//   - Expert tensors keep llama.cpp's stacked form: blk.L.ffn_down_exps
//     plus either the merged blk.L.ffn_gate_up_exps ([cols, 2×ffn,
//     experts]; each expert's gate rows, then its up rows) or separate
//     blk.L.ffn_gate_exps and ffn_up_exps. Merged is used for the
//     architectures whose llama.cpp loader accepts it (MergedArchs, e.g.
//     qwen35moe): an expert is then two reads, gate+up and down. The
//     others (qwen3moe) get three.
//   - general.alignment is 4096, so every tensor starts on a page.
//   - Every expert's slice of every expert tensor is a whole number of
//     pages, so every slice starts on a page too. When the model's
//     expert FFN width does not give that, it is padded with zero rows of
//     gate and up and zero columns of down up to the smallest width that
//     does, and expert_feed_forward_length says the new width. Zero gate
//     and up rows give silu(0)·0 = 0, and zero down columns add 0, so the
//     model computes the same output; les.pack.expert_ffn keeps the
//     original width. Real shapes need no padding (e.g. hidden 2048,
//     FFN 512 in Q4_K, Q5_0, Q6_K or Q8_0); Options.NoPad turns it off.
//   - les.pack.version and les.pack.layout = "compat" mark the file;
//     every other key and every non-expert tensor is copied unchanged.

// KeyLayout is the metadata key naming a packed file's layout: LayoutCompat,
// or absent for the blob layout.
const KeyLayout = packfmt.KeyLayout

// KeyExpertFFN is the original expert FFN width of a compat file whose
// experts were padded (absent when they were not).
const KeyExpertFFN = "les.pack.expert_ffn"

// Gate/up storage choices for the compat layout (Options.GateUp).
const (
	GateUpAuto   = "auto"
	GateUpMerged = "merged"
	GateUpSplit  = "split"
)

// MergedArchs are the architectures whose loader in llama.cpp v0.4.0 (the
// release the golden fixtures were made with) accepts a merged
// ffn_gate_up_exps tensor of dims [n_embd, 2×n_ff_exp, n_expert] in place
// of separate ffn_gate_exps and ffn_up_exps (create_tensor_gate_up_exps in
// src/llama-model.cpp, called by src/models/<arch>.cpp). Its qwen3moe
// loader requires the separate tensors.
var MergedArchs = map[string]bool{
	"qwen35moe": true, "qwen3next": true, "qwen4exp": true, "deepseek2": true,
	"deepseek2-ocr": true, "cohere2moe": true, "granite_swa": true, "hy_v3": true,
}

// IsCompat reports whether f was written by Pack with LayoutCompat.
func IsCompat(f *gguf.File) bool { return packfmt.IsCompat(f) }

// compatPlan is what packCompat writes for one expert layer.
type compatPlan struct {
	le     *ExpertLayer
	types  [3]tensor.Type // gate, up, down
	ffn    int            // padded expert FFN width
	merged bool
}

// outSlices returns the byte size of one expert's slice of each output
// tensor: gate_up and down (merged) or gate, up and down.
func (p *compatPlan) outSlices() []int64 {
	rs := func(t tensor.Type, cols int) int64 { n, _ := t.RowSize(cols); return int64(n) }
	g := int64(p.ffn) * rs(p.types[0], p.le.Hidden)
	u := int64(p.ffn) * rs(p.types[1], p.le.Hidden)
	d := int64(p.le.Hidden) * rs(p.types[2], p.ffn)
	if p.merged {
		return []int64{g + u, d}
	}
	return []int64{g, u, d}
}

// compatFFN returns the smallest expert FFN width >= the layers' own for
// which every expert slice of every output tensor is a whole number of
// Alignment pages, searching up to 16× the width.
func compatFFN(plans []*compatPlan) (int, error) {
	ffn := plans[0].le.FFN
	step := 1
	for _, p := range plans {
		if p.le.FFN != ffn {
			return 0, fmt.Errorf("pack: layers %d and %d have expert FFN widths %d and %d; the compat layout pads one width for all (use --no-pad)", plans[0].le.Layer, p.le.Layer, ffn, p.le.FFN)
		}
		step = lcm(step, p.types[2].BlockSize())
	}
	for f := ffn; f <= 16*ffn; f += step {
		if f%step != 0 {
			continue
		}
		ok := true
		for _, p := range plans {
			p.ffn = f
			for _, s := range p.outSlices() {
				ok = ok && s%Alignment == 0
			}
		}
		if ok {
			return f, nil
		}
	}
	for _, p := range plans {
		p.ffn = ffn
	}
	return 0, fmt.Errorf("pack: no expert FFN width up to %d puts every expert slice on a %d-byte page; use --no-pad", 16*ffn, Alignment)
}

func lcm(a, b int) int {
	x, y := a, b
	for y != 0 {
		x, y = y, x%y
	}
	return a / x * b
}

// packCompat writes the compat layout (see the comment at the top of this
// file). f is the open input; layers and expertNames come from
// ExpertLayers.
func packCompat(ctx context.Context, f *gguf.File, in, out string, layers []*ExpertLayer, expertNames map[string]bool, opts Options) error {
	arch := f.Architecture()
	var merged bool
	switch opts.GateUp {
	case "", GateUpAuto:
		merged = MergedArchs[arch]
	case GateUpMerged:
		merged = true
	case GateUpSplit:
	default:
		return fmt.Errorf("pack: unknown gate/up storage %q (want %s, %s or %s)", opts.GateUp, GateUpAuto, GateUpMerged, GateUpSplit)
	}
	plans := make([]*compatPlan, len(layers))
	byLayer := map[int]*compatPlan{}
	for i, le := range layers {
		p := &compatPlan{le: le, ffn: le.FFN, merged: merged}
		for j := range 3 {
			t, _, _ := le.Part(0, j)
			p.types[j] = t.Type
		}
		if merged && p.types[0] != p.types[1] {
			return fmt.Errorf("pack: layer %d: gate (%s) and up (%s) have different types, so they cannot be merged into %s; use --gate-up split", le.Layer, p.types[0], p.types[1], MergedName(le.Layer))
		}
		plans[i], byLayer[le.Layer] = p, p
	}
	ffn := layers[0].FFN
	if !opts.NoPad {
		var err error
		if ffn, err = compatFFN(plans); err != nil {
			return err
		}
	}
	ffnKey := arch + ".expert_feed_forward_length"
	if ffn != layers[0].FFN && !f.Has(ffnKey) {
		return fmt.Errorf("pack: the experts need padding to %d but %s has no %s to record it; use --no-pad", ffn, in, ffnKey)
	}

	dst, err := gguf.CreateOutput(out)
	if err != nil {
		return fmt.Errorf("pack: %w", err)
	}
	defer dst.Close()
	w := gguf.NewWriter(dst)
	for _, kv := range f.KVs() {
		if kv.Key == "general.alignment" || strings.HasPrefix(kv.Key, "les.pack.") {
			continue
		}
		var v any = kv.Value
		if kv.Key == ffnKey && ffn != layers[0].FFN {
			v = uint32(ffn)
		}
		if err := w.AddKV(kv.Key, v); err != nil {
			return fmt.Errorf("pack: %w", err)
		}
	}
	meta := []struct {
		k string
		v any
	}{
		{"general.alignment", uint32(Alignment)},
		{KeyVersion, uint32(Version)}, {KeyLayout, LayoutCompat}, {KeyAlignment, uint32(Alignment)}, {KeySource, filepath.Base(in)},
	}
	if ffn != layers[0].FFN {
		meta = append(meta, struct {
			k string
			v any
		}{KeyExpertFFN, uint32(layers[0].FFN)})
	}
	for _, kv := range meta {
		if err := w.AddKV(kv.k, kv.v); err != nil {
			return fmt.Errorf("pack: %w", err)
		}
	}

	// Output tensors: non-expert ones as they are; a layer's expert
	// tensors where its first expert tensor stood.
	type outTensor struct {
		name string
		size int64
		src  func() io.Reader
	}
	var outs []outTensor
	var total int64
	ra := f.ReaderAt()
	done := map[int]bool{}
	for _, t := range f.Tensors() {
		if !expertNames[t.Name] {
			t := t
			if err := w.AddTensor(t.Name, t.Type, t.Dims); err != nil {
				return fmt.Errorf("pack: %w", err)
			}
			outs = append(outs, outTensor{t.Name, t.Size, func() io.Reader { return io.NewSectionReader(ra, f.TensorOffset(t), t.Size) }})
			total += t.Size
			continue
		}
		l, _, _ := parseExpertName(t.Name)
		if done[l] {
			continue
		}
		done[l] = true
		p := byLayer[l]
		p.ffn = ffn
		E, H := uint64(p.le.Experts), uint64(p.le.Hidden)
		type spec struct {
			name  string
			typ   tensor.Type
			dims  []uint64
			parts []int // input parts concatenated per expert
		}
		specs := []spec{
			{StackedName(l, 0), p.types[0], []uint64{H, uint64(ffn), E}, []int{0}},
			{StackedName(l, 1), p.types[1], []uint64{H, uint64(ffn), E}, []int{1}},
			{StackedName(l, 2), p.types[2], []uint64{uint64(ffn), H, E}, []int{2}},
		}
		if merged {
			specs = []spec{
				{MergedName(l), p.types[0], []uint64{H, 2 * uint64(ffn), E}, []int{0, 1}},
				specs[2],
			}
		}
		slices := p.outSlices()
		for k, s := range specs {
			if err := w.AddTensor(s.name, s.typ, s.dims); err != nil {
				return fmt.Errorf("pack: %w", err)
			}
			size := slices[k] * int64(E)
			parts := s.parts
			outs = append(outs, outTensor{s.name, size, func() io.Reader {
				return &expertReader{ra: ra, f: f, p: p, parts: parts, slice: slices[k]}
			}})
			total += size
		}
	}
	if err := w.WriteHeader(); err != nil {
		return fmt.Errorf("pack: %w", err)
	}
	var written int64
	for _, o := range outs {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := w.WriteTensorData(o.name, o.src()); err != nil {
			return fmt.Errorf("pack: %w", err)
		}
		written += o.size
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

// expertReader streams one compat output tensor: for each expert in turn,
// its input parts (gate, up or down slices), each padded to the plan's FFN
// width with zeros (zero rows for gate and up, zero columns for down).
type expertReader struct {
	ra    io.ReaderAt
	f     *gguf.File
	p     *compatPlan
	parts []int
	slice int64 // output bytes per expert
	e     int
	buf   []byte
	left  []byte
}

func (r *expertReader) Read(b []byte) (int, error) {
	if len(r.left) == 0 {
		if r.e >= r.p.le.Experts {
			return 0, io.EOF
		}
		if err := r.fill(); err != nil {
			return 0, err
		}
		r.e++
	}
	n := copy(b, r.left)
	r.left = r.left[n:]
	return n, nil
}

// fill builds expert r.e's output slice in r.buf.
func (r *expertReader) fill() error {
	if r.buf == nil {
		r.buf = make([]byte, r.slice)
	}
	clear(r.buf)
	at := int64(0)
	for _, part := range r.parts {
		t, off, size := r.p.le.Part(r.e, part)
		src := make([]byte, size)
		if n, err := r.ra.ReadAt(src, r.f.TensorOffset(t)+off); n < len(src) {
			return fmt.Errorf("read %s: %w", t.Name, err)
		}
		if part < 2 { // gate or up: FFN rows, then zero rows
			copy(r.buf[at:], src)
			rs, _ := r.p.types[part].RowSize(r.p.le.Hidden)
			at += int64(r.p.ffn) * int64(rs)
			continue
		}
		// down: Hidden rows of FFN columns, each padded to the new width
		inRow := size / int64(r.p.le.Hidden)
		outRow, _ := r.p.types[2].RowSize(r.p.ffn)
		for row := range int64(r.p.le.Hidden) {
			copy(r.buf[at+row*int64(outRow):], src[row*inRow:(row+1)*inRow])
		}
		at += int64(r.p.le.Hidden) * int64(outRow)
	}
	if at != r.slice {
		return fmt.Errorf("pack: internal error: expert slice of %d bytes, planned %d", at, r.slice)
	}
	r.left = r.buf
	return nil
}

// DescribeCompat summarises the compat file at path in one line: how gate
// and up are stored, the reads per expert and any FFN padding.
func DescribeCompat(path string) string {
	f, err := gguf.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	layers, _, err := ExpertLayers(f)
	if err != nil || len(layers) == 0 {
		return "no expert layers"
	}
	s := "separate gate/up/down, 3 aligned reads per expert"
	if layers[0].Merged() {
		s = "merged gate_up + down, 2 aligned reads per expert"
	}
	if n, err := f.Uint(KeyExpertFFN); err == nil {
		s += fmt.Sprintf(", expert FFN padded %d -> %d (+%.0f%% expert bytes)", n, layers[0].FFN, 100*(float64(layers[0].FFN)/float64(n)-1))
	}
	return s
}
