package quant

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/lesfarm/lesfarm/runtime/gguf"
	"github.com/lesfarm/lesfarm/runtime/pack"
	"github.com/lesfarm/lesfarm/runtime/tensor"
)

// Metadata keys Quantize writes besides llama.cpp's general.file_type and
// general.quantization_version.
const (
	KeyType   = "les.quant.type"   // string: the requested type (or "mixed" for a plan)
	KeySource = "les.quant.source" // string: base name of the input file
)

// Options configures Quantize.
type Options struct {
	// Type is the target type of every quantizable tensor (one of Types).
	Type tensor.Type
	// TypeFor, if set, overrides Type per tensor (the planner's choice):
	// it returns the wanted type and true, or false to use Type. Fallback
	// rules still apply.
	TypeFor func(name string) (tensor.Type, bool)
	// Pack writes the packed expert layout (runtime/pack): one
	// page-aligned blob per (layer, expert).
	Pack bool
	// Threads quantizes with this many threads (default 1).
	Threads int
	// Meta are extra metadata pairs (key, value) written after the input's.
	Meta []KV
	// Label is the KeyType value (default Type's name).
	Label string
	// Progress, if set, is called with source bytes processed and total.
	Progress func(done, total int64)
	// Requantize accepts an already quantized input: its tensors are
	// dequantized and quantized again (see target).
	Requantize bool
}

// KV is one metadata pair for Options.Meta.
type KV struct {
	Key   string
	Value any
}

// TensorResult is what happened to one tensor.
type TensorResult struct {
	Name     string
	From, To tensor.Type
	FellBack bool // the requested type did not fit the rows
	Bytes    int64
}

// Result summarises a conversion.
type Result struct {
	Tensors []TensorResult
	Size    int64 // output file size
}

// FellBack returns the tensors that took a fallback type.
func (r *Result) FellBack() []TensorResult {
	var out []TensorResult
	for _, t := range r.Tensors {
		if t.FellBack {
			out = append(out, t)
		}
	}
	return out
}

// ErrSamePath is wrapped when the output would overwrite the input.
var ErrSamePath = errors.New("output path equals the input")

// SamePath reports whether a and b name the same file (or would).
func SamePath(a, b string) bool {
	aa, _ := filepath.Abs(a)
	ab, _ := filepath.Abs(b)
	if aa == ab {
		return true
	}
	sa, err1 := os.Stat(a)
	sb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(sa, sb)
}

// PlanTypes returns, without writing, the type every tensor of f would get:
// the same decisions Quantize makes.
func PlanTypes(f *gguf.File, opts Options) ([]TensorResult, error) {
	var out []TensorResult
	for _, t := range f.Tensors() {
		want := opts.Type
		if opts.TypeFor != nil {
			if w, ok := opts.TypeFor(t.Name); ok {
				want = w
			}
		}
		to, fb, err := target(t.Name, t.Dims, t.Type, want, opts.Requantize)
		if err != nil {
			return nil, err
		}
		size, err := gguf.TensorSize(to, t.Dims)
		if err != nil {
			return nil, fmt.Errorf("quant: tensor %s: %w", t.Name, err)
		}
		out = append(out, TensorResult{Name: t.Name, From: t.Type, To: to, FellBack: fb, Bytes: size})
	}
	return out, nil
}

// Quantize converts the GGUF model at in into out, one tensor at a time
// (a few MiB of memory whatever the model size). The output is written to
// a temporary file next to out and renamed when complete. Errors: a packed
// or already quantized input, rows no type fits, out equal to in.
func Quantize(ctx context.Context, in, out string, opts Options) (*Result, error) {
	if SamePath(in, out) {
		return nil, fmt.Errorf("quant: %w (%s); write to another file with -o", ErrSamePath, out)
	}
	if !slicesContains(Types, opts.Type) {
		return nil, fmt.Errorf("quant: type %s is not a target type", opts.Type)
	}
	f, err := gguf.Open(in)
	if err != nil {
		return nil, fmt.Errorf("quant: %w", err)
	}
	defer f.Close()
	if pack.IsPacked(f) {
		return nil, fmt.Errorf("quant: %s is packed; quantize the unpacked model (and add --pack to pack the output)", in)
	}
	plan, err := PlanTypes(f, opts)
	if err != nil {
		return nil, err
	}
	res := &Result{Tensors: plan}
	target := out
	if opts.Pack {
		target = out + ".unpacked"
	}
	if err := write(ctx, f, in, target, opts, plan); err != nil {
		return nil, err
	}
	if opts.Pack {
		defer os.Remove(target)
		if err := pack.Pack(ctx, target, out, pack.Options{}); err != nil {
			return nil, fmt.Errorf("quant: %w", err)
		}
	}
	st, err := os.Stat(out)
	if err != nil {
		return nil, fmt.Errorf("quant: %w", err)
	}
	res.Size = st.Size()
	return res, nil
}

func slicesContains(ts []tensor.Type, t tensor.Type) bool {
	for _, v := range ts {
		if v == t {
			return true
		}
	}
	return false
}

func write(ctx context.Context, f *gguf.File, in, out string, opts Options, plan []TensorResult) error {
	dst, err := gguf.CreateOutput(out)
	if err != nil {
		return fmt.Errorf("quant: %w", err)
	}
	defer dst.Close()
	w := gguf.NewWriter(dst)
	skip := map[string]bool{"general.file_type": true, "general.quantization_version": true, KeyType: true, KeySource: true}
	for _, kv := range opts.Meta {
		skip[kv.Key] = true
	}
	for _, kv := range f.KVs() {
		if skip[kv.Key] || strings.HasPrefix(kv.Key, PlanPrefix) {
			continue
		}
		if err := w.AddKV(kv.Key, kv.Value); err != nil {
			return fmt.Errorf("quant: %w", err)
		}
	}
	label := opts.Label
	if label == "" {
		label = opts.Type.String()
	}
	ftype := FileType(opts.Type)
	if opts.TypeFor != nil {
		ftype = FileType(dominant(plan))
	}
	for _, kv := range append([]KV{
		{"general.file_type", ftype}, {"general.quantization_version", uint32(2)},
		{KeyType, label}, {KeySource, filepath.Base(in)},
	}, opts.Meta...) {
		if err := w.AddKV(kv.Key, kv.Value); err != nil {
			return fmt.Errorf("quant: %w", err)
		}
	}
	var total int64
	for i, t := range f.Tensors() {
		if err := w.AddTensor(t.Name, plan[i].To, t.Dims); err != nil {
			return fmt.Errorf("quant: %w", err)
		}
		total += t.Size
	}
	if err := w.WriteHeader(); err != nil {
		return fmt.Errorf("quant: %w", err)
	}
	pool := tensor.NewPool(max(opts.Threads, 1))
	defer pool.Close()
	var done int64
	for i, t := range f.Tensors() {
		if err := ctx.Err(); err != nil {
			return err
		}
		src := io.NewSectionReader(f.ReaderAt(), f.TensorOffset(t), t.Size)
		var r io.Reader = src
		if plan[i].To != t.Type {
			r = &convReader{ctx: ctx, src: src, from: t.Type, to: plan[i].To, cols: int(t.Dims[0]), pool: pool, name: t.Name}
		}
		if err := w.WriteTensorData(t.Name, r); err != nil {
			return fmt.Errorf("quant: %w", err)
		}
		done += t.Size
		if opts.Progress != nil {
			opts.Progress(done, total)
		}
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("quant: %w", err)
	}
	if err := dst.Commit(); err != nil {
		return fmt.Errorf("quant: %w", err)
	}
	return nil
}

// dominant returns the type holding the most output bytes among the
// quantized tensors.
func dominant(plan []TensorResult) tensor.Type {
	by := map[tensor.Type]int64{}
	var best tensor.Type = tensor.F16
	for _, t := range plan {
		if t.To == t.From {
			continue
		}
		by[t.To] += t.Bytes
		if by[t.To] > by[best] {
			best = t.To
		}
	}
	return best
}

// convReader streams a tensor converted from one type to another, a group
// of rows (about 1 MiB of source) at a time.
type convReader struct {
	ctx      context.Context
	src      io.Reader
	from, to tensor.Type
	cols     int
	pool     *tensor.Pool
	name     string

	inBuf  []byte
	f32    []float32
	outBuf []byte
	pend   []byte
}

func (c *convReader) Read(p []byte) (int, error) {
	if len(c.pend) == 0 {
		if err := c.ctx.Err(); err != nil {
			return 0, err
		}
		inRow, err := c.from.RowSize(c.cols)
		if err != nil {
			return 0, err
		}
		outRow, err := c.to.RowSize(c.cols)
		if err != nil {
			return 0, err
		}
		rows := max(1, (1<<20)/inRow)
		if c.inBuf == nil {
			c.inBuf = make([]byte, rows*inRow)
			c.f32 = make([]float32, rows*c.cols)
			c.outBuf = make([]byte, rows*outRow)
		}
		n, err := io.ReadFull(c.src, c.inBuf)
		if n == 0 {
			if errors.Is(err, io.ErrUnexpectedEOF) {
				err = io.EOF
			}
			return 0, err
		}
		if n%inRow != 0 {
			return 0, fmt.Errorf("tensor %s: %d bytes is not a whole number of rows", c.name, n)
		}
		got := n / inRow
		x := c.f32[:got*c.cols]
		if err := tensor.Dequantize(c.from, c.inBuf[:n], x); err != nil {
			return 0, fmt.Errorf("tensor %s: %w", c.name, err)
		}
		dst := c.outBuf[:got*outRow]
		if err := tensor.QuantizeParallel(c.pool, c.to, x, dst); err != nil {
			return 0, fmt.Errorf("tensor %s: %w", c.name, err)
		}
		c.pend = dst
	}
	n := copy(p, c.pend)
	c.pend = c.pend[n:]
	return n, nil
}
