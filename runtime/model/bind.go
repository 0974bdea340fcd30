package model

import (
	"fmt"

	"github.com/lesfarm/lesfarm/runtime/gguf"
	"github.com/lesfarm/lesfarm/runtime/moe"
	"github.com/lesfarm/lesfarm/runtime/tensor"
)

// binder reads resident tensors, recording the first error so the binding
// code reads as a flat list of names.
type binder struct {
	f     *gguf.File
	err   error
	bytes int64
	// swizzle rearranges the matrices and experts read into the swizzled
	// layout where their type has one (Options.GGUFLayout unset).
	swizzle bool
}

func (b *binder) fail(format string, args ...any) {
	if b.err == nil {
		b.err = fmt.Errorf(format, args...)
	}
}

// info looks name up and checks its dims.
func (b *binder) info(name string, dims ...int) (*gguf.TensorInfo, bool) {
	if b.err != nil {
		return nil, false
	}
	t, ok := b.f.Tensor(name)
	if !ok {
		b.fail("tensor %s is missing", name)
		return nil, false
	}
	if len(t.Dims) != len(dims) {
		b.fail("tensor %s has dims %v, want %v", name, t.Dims, dims)
		return nil, false
	}
	for i, d := range dims {
		if t.Dims[i] != uint64(d) {
			b.fail("tensor %s has dims %v, want %v", name, t.Dims, dims)
			return nil, false
		}
	}
	return t, true
}

// matrix reads a 2-D tensor of cols (ne0) × rows (ne1).
func (b *binder) matrix(name string, cols, rows int) tensor.Matrix {
	t, ok := b.info(name, cols, rows)
	if !ok {
		return tensor.Matrix{}
	}
	typ := t.Type
	if !tensor.CanMatVec(typ) {
		b.fail("tensor %s has type %s, which has no kernel; re-quantize the model to F32, F16, BF16, Q8_0, Q4_0, Q5_0, Q4_K, Q5_K or Q6_K", name, typ)
		return tensor.Matrix{}
	}
	if _, err := typ.RowSize(cols); err != nil {
		b.fail("tensor %s: %v", name, err)
		return tensor.Matrix{}
	}
	data, err := readResident(b.f, t)
	if err != nil {
		b.fail("read %s: %w", name, err)
		return tensor.Matrix{}
	}
	b.bytes += int64(len(data))
	swz, err := b.swizzleBytes(typ, data)
	if err != nil {
		b.fail("tensor %s: %v", name, err)
		return tensor.Matrix{}
	}
	return tensor.Matrix{Type: typ, Rows: rows, Cols: cols, Data: data, Swizzled: swz}
}

// swizzleBytes rearranges data, whole rows of typ, into the swizzled layout
// when the binder swizzles and typ has one here, reporting whether it did.
func (b *binder) swizzleBytes(typ tensor.Type, data []byte) (bool, error) {
	if !b.swizzle {
		return false, nil
	}
	return tensor.Swizzle(typ, data)
}

// swizzleExperts rearranges a layer's resident experts (shape's types) into
// the swizzled layout when the binder swizzles, marking them.
func (b *binder) swizzleExperts(ws []moe.Weights, shape moe.LayerShape) error {
	if !b.swizzle {
		return nil
	}
	for e := range ws {
		if err := ws[e].Swizzle(&shape); err != nil {
			return fmt.Errorf("expert %d: %w", e, err)
		}
	}
	return nil
}

// vector reads a 1-D F32 tensor of n elements.
func (b *binder) vector(name string, n int) []float32 {
	m := b.matrixVec(name, n)
	return m
}

func (b *binder) matrixVec(name string, n int) []float32 {
	t, ok := b.info(name, n)
	if !ok {
		return nil
	}
	typ := t.Type
	data, err := b.f.ReadTensor(name)
	if err != nil {
		b.fail("read %s: %w", name, err)
		return nil
	}
	b.bytes += int64(len(data))
	out := make([]float32, n)
	switch typ {
	case tensor.F32, tensor.F16, tensor.BF16:
		if err := tensor.Dequantize(typ, data, out); err != nil {
			b.fail("tensor %s: %v", name, err)
			return nil
		}
	default:
		b.fail("tensor %s has type %s; norm vectors must be F32, F16 or BF16", name, typ)
		return nil
	}
	return out
}

// expertType checks a 3-D expert tensor and returns its type without
// reading it.
func (b *binder) expertType(name string, cols, rows, experts int) tensor.Type {
	t, ok := b.info(name, cols, rows, experts)
	if !ok {
		return 0
	}
	typ := t.Type
	if !tensor.CanMatVec(typ) {
		b.fail("tensor %s has type %s, which has no kernel; re-quantize the model to F32, F16, BF16, Q8_0, Q4_0, Q5_0, Q4_K, Q5_K or Q6_K", name, typ)
		return 0
	}
	if _, err := typ.RowSize(cols); err != nil {
		b.fail("tensor %s: %v", name, err)
	}
	return typ
}

// slabs reads a 3-D expert tensor into RAM and splits it per expert.
func (b *binder) slabs(name string, experts int) ([][]byte, error) {
	t, ok := b.f.Tensor(name)
	if !ok {
		return nil, fmt.Errorf("tensor %s is missing", name)
	}
	data, err := readResident(b.f, t)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	if len(data)%experts != 0 {
		return nil, fmt.Errorf("tensor %s: %d bytes do not split into %d experts", name, len(data), experts)
	}
	n := len(data) / experts
	out := make([][]byte, experts)
	for e := range out {
		out[e] = data[e*n : (e+1)*n : (e+1)*n]
	}
	return out, nil
}

// metaReader reads prefixed hyper-parameters, recording the first error.
type metaReader struct {
	f      *gguf.File
	prefix string
	err    error
}

func (r *metaReader) int(key string, def int) int {
	k := r.prefix + key
	if !r.f.Has(k) {
		if def == 0 && r.err == nil {
			r.err = fmt.Errorf("metadata key %s is missing", k)
		}
		return def
	}
	v, err := r.f.Uint(k)
	if err != nil || v > 1<<31 {
		if r.err == nil {
			if err == nil {
				err = fmt.Errorf("metadata key %s = %d is out of range", k, v)
			}
			r.err = err
		}
		return def
	}
	return int(v)
}

func (r *metaReader) float(key string, def float32) float32 {
	k := r.prefix + key
	if !r.f.Has(k) {
		return def
	}
	v, err := r.f.Float(k)
	if err != nil {
		if r.err == nil {
			r.err = err
		}
		return def
	}
	return float32(v)
}

func metaString(f *gguf.File, key string) (string, error) { return f.String(key) }
