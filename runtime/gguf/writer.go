package gguf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"

	"github.com/lesfarm/lesfarm/runtime/ggml"
)

// Writer streams a GGUF v3 file: declare metadata with AddKV and tensors
// with AddTensor, then call WriteHeader, then WriteTensorData for every
// tensor in declaration order, then Close. Tensor data is copied straight
// from the caller's readers, so a file of many GB never sits in memory.
// The layout matches llama.cpp's writer: each tensor starts at a multiple of
// the alignment and is zero-padded to the next one.
//
// A Writer is not safe for concurrent use. After the first error every
// later call returns that error.
type Writer struct {
	w         io.Writer
	n         int64 // bytes written to w
	align     int64
	alignSet  bool // general.alignment given explicitly through AddKV
	kvs       [][]byte
	keys      map[string]bool
	tensors   []wtensor
	tindex    map[string]int
	dataSize  int64
	header    bool
	headerLen int64
	next      int
	closed    bool
	err       error
}

type wtensor struct {
	name   string
	typ    ggml.Type
	dims   []uint64
	size   int64
	offset int64
}

// NewWriter returns a Writer that writes a GGUF file to w. It does not
// close w.
func NewWriter(w io.Writer) *Writer {
	return &Writer{w: w, align: DefaultAlignment, keys: map[string]bool{}, tindex: map[string]int{}}
}

// SetAlignment sets the tensor data alignment (a power of two, default 32).
// When it is not 32 the header also gets general.alignment (uint32). It must
// be called before WriteHeader; an invalid value makes WriteHeader fail.
func (w *Writer) SetAlignment(n int64) {
	if w.err != nil {
		return
	}
	if w.header {
		w.err = errors.New("gguf: SetAlignment after WriteHeader")
		return
	}
	if n <= 0 || n > MaxAlignment || n&(n-1) != 0 {
		w.err = fmt.Errorf("gguf: alignment %d is not a power of two in [1, %d]", n, MaxAlignment)
		return
	}
	w.align = n
}

// Alignment returns the alignment the file is written with.
func (w *Writer) Alignment() int64 { return w.align }

// AddKV adds a metadata pair. v may be a string, bool, any sized integer
// (int8..int64, uint8..uint64), float32, float64, a slice of one of those
// ([]string, []int32, []float32, []uint32, ...), or a Value read from a File
// (so a model can be copied with its metadata). int and uint are written as
// int32/uint32 when they fit and as 64-bit otherwise; llama.cpp checks exact
// types (e.g. uint32 for block_count), so prefer sized types. Adding
// general.alignment also sets the alignment.
func (w *Writer) AddKV(key string, v any) error {
	if w.err != nil {
		return w.err
	}
	if w.header {
		return w.fail(fmt.Errorf("gguf: AddKV(%q) after WriteHeader", key))
	}
	if key == "" || len(key) > MaxKeyLen {
		return fmt.Errorf("gguf: metadata key of %d bytes (want 1 to %d)", len(key), MaxKeyLen)
	}
	if w.keys[key] {
		return fmt.Errorf("gguf: duplicate metadata key %q", key)
	}
	var buf bytes.Buffer
	putString(&buf, key)
	vt, err := encodeValue(&buf, v)
	if err != nil {
		return fmt.Errorf("gguf: metadata key %q: %w", key, err)
	}
	if key == "general.alignment" {
		val, err := decodeAlignment(buf.Bytes()[8+len(key):], vt)
		if err != nil {
			return fmt.Errorf("gguf: metadata key %q: %w", key, err)
		}
		w.align, w.alignSet = val, true
	}
	w.keys[key] = true
	w.kvs = append(w.kvs, buf.Bytes())
	return nil
}

func decodeAlignment(p []byte, vt ValueType) (int64, error) {
	if !vt.isInt() {
		return 0, fmt.Errorf("alignment must be an integer, not %s", vt)
	}
	v := decodeScalar(vt, p[4:])
	if vt.isSigned() && int64(v) < 0 || v == 0 || v > MaxAlignment || v&(v-1) != 0 {
		return 0, fmt.Errorf("alignment %d is not a power of two in [1, %d]", int64(v), MaxAlignment)
	}
	return int64(v), nil
}

// AddTensor declares a tensor of type typ and ggml dims (ne0 first). Its
// size follows from them; its data is written later by WriteTensorData, in
// declaration order.
func (w *Writer) AddTensor(name string, typ ggml.Type, dims []uint64) error {
	if w.err != nil {
		return w.err
	}
	if w.header {
		return w.fail(fmt.Errorf("gguf: AddTensor(%q) after WriteHeader", name))
	}
	if name == "" || len(name) > MaxKeyLen {
		return fmt.Errorf("gguf: tensor name of %d bytes (want 1 to %d)", len(name), MaxKeyLen)
	}
	if _, dup := w.tindex[name]; dup {
		return fmt.Errorf("gguf: duplicate tensor %q", name)
	}
	size, err := tensorSize(typ, dims)
	if err != nil {
		return fmt.Errorf("gguf: tensor %q: %w", name, err)
	}
	if len(w.tensors) >= MaxTensors {
		return fmt.Errorf("gguf: more than %d tensors", MaxTensors)
	}
	w.tindex[name] = len(w.tensors)
	w.tensors = append(w.tensors, wtensor{name: name, typ: typ, dims: append([]uint64(nil), dims...), size: size})
	return nil
}

// TensorSize returns the byte size of a tensor of type typ and ggml dims,
// with the same checks the reader applies.
func TensorSize(typ ggml.Type, dims []uint64) (int64, error) { return tensorSize(typ, dims) }

func tensorSize(typ ggml.Type, dims []uint64) (int64, error) {
	if len(dims) == 0 || len(dims) > MaxDims {
		return 0, fmt.Errorf("%d dimensions (want 1 to %d)", len(dims), MaxDims)
	}
	if !typ.Known() {
		return 0, fmt.Errorf("unknown tensor type %s", typ)
	}
	elems := uint64(1)
	for i, d := range dims {
		if d == 0 {
			return 0, fmt.Errorf("dimension %d is 0", i)
		}
		hi, lo := bits.Mul64(elems, d)
		if hi != 0 || lo > math.MaxInt64 {
			return 0, fmt.Errorf("dimensions %v overflow", dims)
		}
		elems = lo
	}
	bs := uint64(typ.BlockSize())
	if dims[0]%bs != 0 {
		return 0, fmt.Errorf("row of %d elements is not a multiple of the %s block size %d", dims[0], typ, bs)
	}
	hi, sz := bits.Mul64(elems/bs, uint64(typ.TypeSize()))
	if hi != 0 || sz > math.MaxInt64 {
		return 0, fmt.Errorf("size of %v %s overflows", dims, typ)
	}
	return int64(sz), nil
}

// DataSize returns the size of the tensor data section (with padding) of the
// tensors declared so far.
func (w *Writer) DataSize() int64 {
	var off int64
	for _, t := range w.tensors {
		off = alignUp(off, w.align) + t.size
	}
	return alignUp(off, w.align)
}

// WriteHeader writes the header, the metadata, the tensor infos and the
// padding up to the data section.
func (w *Writer) WriteHeader() error {
	if w.err != nil {
		return w.err
	}
	if w.header {
		return w.fail(errors.New("gguf: WriteHeader called twice"))
	}
	w.header = true
	if w.align != DefaultAlignment && !w.alignSet {
		var buf bytes.Buffer
		putString(&buf, "general.alignment")
		if _, err := encodeValue(&buf, uint32(w.align)); err != nil {
			return w.fail(err)
		}
		w.kvs = append(w.kvs, buf.Bytes())
	}
	var h bytes.Buffer
	le := binary.LittleEndian
	h.Write(le.AppendUint32(nil, Magic))
	h.Write(le.AppendUint32(nil, 3))
	h.Write(le.AppendUint64(nil, uint64(len(w.tensors))))
	h.Write(le.AppendUint64(nil, uint64(len(w.kvs))))
	for _, kv := range w.kvs {
		h.Write(kv)
	}
	var off int64
	for i := range w.tensors {
		t := &w.tensors[i]
		off = alignUp(off, w.align)
		t.offset = off
		off += t.size
		putString(&h, t.name)
		h.Write(le.AppendUint32(nil, uint32(len(t.dims))))
		for _, d := range t.dims {
			h.Write(le.AppendUint64(nil, d))
		}
		h.Write(le.AppendUint32(nil, uint32(t.typ)))
		h.Write(le.AppendUint64(nil, uint64(t.offset)))
	}
	w.dataSize = alignUp(off, w.align)
	h.Write(make([]byte, alignUp(int64(h.Len()), w.align)-int64(h.Len())))
	w.kvs = nil // free the encoded metadata (it can hold a whole vocabulary)
	w.headerLen = int64(h.Len())
	return w.write(h.Bytes())
}

// HeaderSize returns the number of bytes WriteHeader wrote (the absolute
// offset of the data section), or 0 before WriteHeader.
func (w *Writer) HeaderSize() int64 {
	if !w.header {
		return 0
	}
	return w.headerLen
}

// TensorOffset returns the offset of a declared tensor relative to the data
// section; it is known after WriteHeader.
func (w *Writer) TensorOffset(name string) (int64, bool) {
	i, ok := w.tindex[name]
	if !ok || !w.header {
		return 0, false
	}
	return w.tensors[i].offset, true
}

// WriteTensorData copies the data of the tensor called name from r (exactly
// the declared size) and pads to the alignment. Tensors must be written in
// declaration order.
func (w *Writer) WriteTensorData(name string, r io.Reader) error {
	if w.err != nil {
		return w.err
	}
	if !w.header {
		return w.fail(fmt.Errorf("gguf: WriteTensorData(%q) before WriteHeader", name))
	}
	if w.next >= len(w.tensors) {
		return w.fail(fmt.Errorf("gguf: WriteTensorData(%q): all %d declared tensors are already written", name, len(w.tensors)))
	}
	t := w.tensors[w.next]
	if t.name != name {
		return w.fail(fmt.Errorf("gguf: WriteTensorData(%q): tensors must be written in declaration order, next is %q", name, t.name))
	}
	n, err := io.CopyN(countWriter{w}, r, t.size)
	if err != nil {
		if errors.Is(err, io.EOF) {
			return w.fail(fmt.Errorf("gguf: tensor %q: data has %d bytes, want %d", name, n, t.size))
		}
		return w.fail(fmt.Errorf("gguf: tensor %q: %w", name, err))
	}
	w.next++
	if pad := alignUp(t.size, w.align) - t.size; pad > 0 {
		return w.write(make([]byte, pad))
	}
	return nil
}

// WriteTensor writes the data of the tensor called name from a byte slice,
// which must have exactly the declared size.
func (w *Writer) WriteTensor(name string, data []byte) error {
	if i, ok := w.tindex[name]; ok && int64(len(data)) != w.tensors[i].size && w.err == nil {
		return w.fail(fmt.Errorf("gguf: tensor %q: data has %d bytes, want %d", name, len(data), w.tensors[i].size))
	}
	return w.WriteTensorData(name, bytes.NewReader(data))
}

// Close checks that the header and every declared tensor were written. It
// does not close the underlying writer.
func (w *Writer) Close() error {
	if w.closed {
		return w.err
	}
	w.closed = true
	if w.err != nil {
		return w.err
	}
	if !w.header {
		return w.fail(errors.New("gguf: Close before WriteHeader"))
	}
	if w.next < len(w.tensors) {
		return w.fail(fmt.Errorf("gguf: Close: %d of %d tensors not written, first %q", len(w.tensors)-w.next, len(w.tensors), w.tensors[w.next].name))
	}
	return nil
}

func (w *Writer) fail(err error) error {
	if w.err == nil {
		w.err = err
	}
	return err
}

func (w *Writer) write(p []byte) error {
	n, err := w.w.Write(p)
	w.n += int64(n)
	if err != nil {
		return w.fail(fmt.Errorf("gguf: write: %w", err))
	}
	return nil
}

type countWriter struct{ w *Writer }

func (c countWriter) Write(p []byte) (int, error) {
	n, err := c.w.w.Write(p)
	c.w.n += int64(n)
	return n, err
}

func putString(b *bytes.Buffer, s string) {
	b.Write(binary.LittleEndian.AppendUint64(nil, uint64(len(s))))
	b.WriteString(s)
}

// encodeValue writes the type id and the encoded value of v and returns its type.
func encodeValue(b *bytes.Buffer, v any) (ValueType, error) {
	le := binary.LittleEndian
	typ := func(t ValueType) { b.Write(le.AppendUint32(nil, uint32(t))) }
	arr := func(t ValueType, n int) {
		typ(TypeArray)
		b.Write(le.AppendUint32(nil, uint32(t)))
		b.Write(le.AppendUint64(nil, uint64(n)))
	}
	switch x := v.(type) {
	case Value:
		return encodeFileValue(b, x)
	case string:
		if len(x) > MaxStringLen {
			return 0, fmt.Errorf("string of %d bytes exceeds the limit of %d", len(x), MaxStringLen)
		}
		typ(TypeString)
		putString(b, x)
		return TypeString, nil
	case bool:
		typ(TypeBool)
		b.WriteByte(boolByte(x))
		return TypeBool, nil
	case uint8:
		typ(TypeUint8)
		b.WriteByte(x)
		return TypeUint8, nil
	case int8:
		typ(TypeInt8)
		b.WriteByte(byte(x))
		return TypeInt8, nil
	case uint16:
		typ(TypeUint16)
		b.Write(le.AppendUint16(nil, x))
		return TypeUint16, nil
	case int16:
		typ(TypeInt16)
		b.Write(le.AppendUint16(nil, uint16(x)))
		return TypeInt16, nil
	case uint32:
		typ(TypeUint32)
		b.Write(le.AppendUint32(nil, x))
		return TypeUint32, nil
	case int32:
		typ(TypeInt32)
		b.Write(le.AppendUint32(nil, uint32(x)))
		return TypeInt32, nil
	case uint64:
		typ(TypeUint64)
		b.Write(le.AppendUint64(nil, x))
		return TypeUint64, nil
	case int64:
		typ(TypeInt64)
		b.Write(le.AppendUint64(nil, uint64(x)))
		return TypeInt64, nil
	case int:
		if x >= math.MinInt32 && x <= math.MaxInt32 {
			return encodeValue(b, int32(x))
		}
		return encodeValue(b, int64(x))
	case uint:
		if x <= math.MaxUint32 {
			return encodeValue(b, uint32(x))
		}
		return encodeValue(b, uint64(x))
	case float32:
		typ(TypeFloat32)
		b.Write(le.AppendUint32(nil, math.Float32bits(x)))
		return TypeFloat32, nil
	case float64:
		typ(TypeFloat64)
		b.Write(le.AppendUint64(nil, math.Float64bits(x)))
		return TypeFloat64, nil
	}
	// Arrays.
	n, err := arrayLen(v)
	if err != nil {
		return 0, err
	}
	if n > MaxArrayLen {
		return 0, fmt.Errorf("array of %d elements exceeds the limit of %d", n, MaxArrayLen)
	}
	switch x := v.(type) {
	case []string:
		arr(TypeString, n)
		for _, s := range x {
			if len(s) > MaxStringLen {
				return 0, fmt.Errorf("string of %d bytes exceeds the limit of %d", len(s), MaxStringLen)
			}
			putString(b, s)
		}
	case []bool:
		arr(TypeBool, n)
		for _, e := range x {
			b.WriteByte(boolByte(e))
		}
	case []uint8:
		arr(TypeUint8, n)
		b.Write(x)
	case []int8:
		arr(TypeInt8, n)
		for _, e := range x {
			b.WriteByte(byte(e))
		}
	case []uint16:
		arr(TypeUint16, n)
		for _, e := range x {
			b.Write(le.AppendUint16(nil, e))
		}
	case []int16:
		arr(TypeInt16, n)
		for _, e := range x {
			b.Write(le.AppendUint16(nil, uint16(e)))
		}
	case []uint32:
		arr(TypeUint32, n)
		for _, e := range x {
			b.Write(le.AppendUint32(nil, e))
		}
	case []int32:
		arr(TypeInt32, n)
		for _, e := range x {
			b.Write(le.AppendUint32(nil, uint32(e)))
		}
	case []uint64:
		arr(TypeUint64, n)
		for _, e := range x {
			b.Write(le.AppendUint64(nil, e))
		}
	case []int64:
		arr(TypeInt64, n)
		for _, e := range x {
			b.Write(le.AppendUint64(nil, uint64(e)))
		}
	case []int:
		fits := true
		for _, e := range x {
			if e < math.MinInt32 || e > math.MaxInt32 {
				fits = false
			}
		}
		if fits {
			arr(TypeInt32, n)
			for _, e := range x {
				b.Write(le.AppendUint32(nil, uint32(int32(e))))
			}
		} else {
			arr(TypeInt64, n)
			for _, e := range x {
				b.Write(le.AppendUint64(nil, uint64(e)))
			}
		}
	case []float32:
		arr(TypeFloat32, n)
		for _, e := range x {
			b.Write(le.AppendUint32(nil, math.Float32bits(e)))
		}
	case []float64:
		arr(TypeFloat64, n)
		for _, e := range x {
			b.Write(le.AppendUint64(nil, math.Float64bits(e)))
		}
	}
	return TypeArray, nil
}

func arrayLen(v any) (int, error) {
	switch x := v.(type) {
	case []string:
		return len(x), nil
	case []bool:
		return len(x), nil
	case []uint8:
		return len(x), nil
	case []int8:
		return len(x), nil
	case []uint16:
		return len(x), nil
	case []int16:
		return len(x), nil
	case []uint32:
		return len(x), nil
	case []int32:
		return len(x), nil
	case []uint64:
		return len(x), nil
	case []int64:
		return len(x), nil
	case []int:
		return len(x), nil
	case []float32:
		return len(x), nil
	case []float64:
		return len(x), nil
	}
	return 0, fmt.Errorf("unsupported value type %T", v)
}

// encodeFileValue re-encodes a Value read from a File.
func encodeFileValue(b *bytes.Buffer, v Value) (ValueType, error) {
	le := binary.LittleEndian
	if !v.valid {
		return 0, errors.New("invalid (zero) Value")
	}
	b.Write(le.AppendUint32(nil, uint32(v.typ)))
	switch v.typ {
	case TypeString:
		putString(b, v.str)
	case TypeArray:
		raw, err := v.arr.raw()
		if err != nil {
			return 0, err
		}
		b.Write(le.AppendUint32(nil, uint32(v.arr.elem)))
		b.Write(le.AppendUint64(nil, v.arr.count))
		b.Write(raw)
	default:
		var p [8]byte
		le.PutUint64(p[:], v.bits)
		b.Write(p[:v.typ.size()])
	}
	return v.typ, nil
}

func boolByte(x bool) byte {
	if x {
		return 1
	}
	return 0
}
