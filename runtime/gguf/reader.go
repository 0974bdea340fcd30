package gguf

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"os"

	"github.com/lesfarm/lesfarm/runtime/ggml"
)

// Magic is the GGUF file magic "GGUF" read as a little-endian uint32.
const Magic = 0x46554747

// DefaultAlignment is the tensor data alignment when general.alignment is absent.
const DefaultAlignment = 32

// Limits applied while parsing. They are far above what real models use and
// exist so a hostile header cannot make the parser loop or allocate for long;
// every length is also checked against the bytes left in the file before
// anything is allocated.
const (
	MaxKVs          = 1 << 16 // metadata key-value pairs
	MaxTensors      = 1 << 20 // tensor infos
	MaxKeyLen       = 1 << 16 // bytes in a key or tensor name
	MaxStringLen    = 1 << 28 // bytes in a string value
	MaxArrayLen     = 1 << 28 // elements in an array value
	MaxDims         = 4       // dimensions of a tensor (GGML_MAX_DIMS)
	MaxAlignment    = 1 << 24 // general.alignment
	minTensorInfoSz = 8 + 4 + 8 + 4 + 8
)

// File is a parsed GGUF file: header, metadata and tensor infos. Tensor data
// is read on demand through TensorReader or ReadTensor. A File is safe for
// concurrent use once Parse or Open returned; it holds the underlying reader
// until Close.
type File struct {
	Version    uint32
	Alignment  int64 // general.alignment, default 32
	DataOffset int64 // absolute file offset of the tensor data section
	Size       int64 // file size

	r       io.ReaderAt
	closer  io.Closer
	kvs     []KV
	kvIndex map[string]int
	tensors []*TensorInfo
	tIndex  map[string]int
}

// TensorInfo describes one tensor of a GGUF file.
type TensorInfo struct {
	Name   string
	Dims   []uint64 // ggml order: Dims[0] (ne0) is the contiguous dimension
	Type   ggml.Type
	Offset int64 // relative to DataOffset
	Size   int64 // bytes
}

// Elements returns the number of elements of the tensor.
func (t *TensorInfo) Elements() int64 {
	n := int64(1)
	for _, d := range t.Dims {
		n *= int64(d)
	}
	return n
}

// Open opens path, parses its header, metadata and tensor infos, and keeps
// the file open for random access to tensor data. Errors name the path.
func Open(path string) (*File, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	st, err := fh.Stat()
	if err != nil {
		fh.Close()
		return nil, fmt.Errorf("gguf: %w", err)
	}
	if st.IsDir() {
		fh.Close()
		return nil, fmt.Errorf("gguf: %s is a directory, not a GGUF file", path)
	}
	f, err := parse(fh, st.Size())
	if err != nil {
		fh.Close()
		return nil, fmt.Errorf("gguf: %s: %w", path, err)
	}
	f.closer = fh
	return f, nil
}

// Parse parses a GGUF file of size bytes from r. The File reads tensor data
// and arrays from r later, so r must stay usable until the File is no longer
// used. Close on such a File does not close r.
func Parse(r io.ReaderAt, size int64) (*File, error) {
	f, err := parse(r, size)
	if err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	return f, nil
}

// Close closes the file opened by Open. It is a no-op for a File from Parse.
func (f *File) Close() error {
	if f.closer == nil {
		return nil
	}
	err := f.closer.Close()
	f.closer = nil
	return err
}

// byteReader reads the header sequentially with a position and the file
// size, so every length can be checked against the bytes that remain.
type byteReader struct {
	br   *bufio.Reader
	pos  int64
	size int64
	buf  [8]byte
}

var errTruncated = errors.New("unexpected end of file")

func (b *byteReader) remaining() int64 { return b.size - b.pos }

func (b *byteReader) read(n int) ([]byte, error) {
	if int64(n) > b.remaining() {
		return nil, errTruncated
	}
	if _, err := io.ReadFull(b.br, b.buf[:n]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, errTruncated
		}
		return nil, err
	}
	b.pos += int64(n)
	return b.buf[:n], nil
}

func (b *byteReader) u32() (uint32, error) {
	p, err := b.read(4)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(p), nil
}

func (b *byteReader) u64() (uint64, error) {
	p, err := b.read(8)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(p), nil
}

// skip advances n bytes (n already checked against remaining).
func (b *byteReader) skip(n int64) error {
	if n > b.remaining() {
		return errTruncated
	}
	for n > 0 {
		chunk := min(n, 1<<30)
		if _, err := b.br.Discard(int(chunk)); err != nil {
			if errors.Is(err, io.EOF) {
				return errTruncated
			}
			return err
		}
		b.pos += chunk
		n -= chunk
	}
	return nil
}

// str reads a GGUF string (uint64 length + bytes) of at most max bytes.
func (b *byteReader) str(max uint64) (string, error) {
	n, err := b.u64()
	if err != nil {
		return "", err
	}
	if n > max {
		return "", fmt.Errorf("string of %d bytes exceeds the limit of %d", n, max)
	}
	if int64(n) > b.remaining() {
		return "", fmt.Errorf("string of %d bytes at offset %d runs past the end of the file (%d bytes)", n, b.pos, b.size)
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(b.br, p); err != nil {
		return "", errTruncated
	}
	b.pos += int64(n)
	return string(p), nil
}

// skipStr skips a GGUF string, checking its length.
func (b *byteReader) skipStr(max uint64) error {
	n, err := b.u64()
	if err != nil {
		return err
	}
	if n > max {
		return fmt.Errorf("string of %d bytes exceeds the limit of %d", n, max)
	}
	if int64(n) > b.remaining() {
		return fmt.Errorf("string of %d bytes at offset %d runs past the end of the file (%d bytes)", n, b.pos, b.size)
	}
	return b.skip(int64(n))
}

func parse(r io.ReaderAt, size int64) (*File, error) {
	if size < 0 {
		return nil, fmt.Errorf("negative file size %d", size)
	}
	b := &byteReader{br: bufio.NewReaderSize(io.NewSectionReader(r, 0, size), 64<<10), size: size}
	magic, err := b.u32()
	if err != nil {
		return nil, fmt.Errorf("file of %d bytes is too short for a GGUF header", size)
	}
	if magic != Magic {
		return nil, fmt.Errorf("not a GGUF file (magic %q, want \"GGUF\")", le32String(magic))
	}
	f := &File{r: r, Size: size, Alignment: DefaultAlignment}
	if f.Version, err = b.u32(); err != nil {
		return nil, fmt.Errorf("header: %w", err)
	}
	switch {
	case f.Version == 2 || f.Version == 3:
	case f.Version&0xffff == 0 && f.Version != 0:
		return nil, fmt.Errorf("big-endian GGUF (version bytes %#x) is not supported", f.Version)
	default:
		return nil, fmt.Errorf("unsupported GGUF version %d (want 2 or 3)", f.Version)
	}
	nTensors, err := b.u64()
	if err != nil {
		return nil, fmt.Errorf("header: %w", err)
	}
	nKV, err := b.u64()
	if err != nil {
		return nil, fmt.Errorf("header: %w", err)
	}
	if nKV > MaxKVs {
		return nil, fmt.Errorf("header declares %d metadata pairs, more than the limit of %d", nKV, MaxKVs)
	}
	if nTensors > MaxTensors {
		return nil, fmt.Errorf("header declares %d tensors, more than the limit of %d", nTensors, MaxTensors)
	}
	// Each KV takes at least 8 (key len) + 4 (type) + 1 bytes.
	if nKV*13 > uint64(b.remaining()) {
		return nil, fmt.Errorf("header declares %d metadata pairs but only %d bytes follow", nKV, b.remaining())
	}
	f.kvs = make([]KV, 0, nKV)
	f.kvIndex = make(map[string]int, nKV)
	for i := uint64(0); i < nKV; i++ {
		kv, err := f.readKV(b)
		if err != nil {
			if kv.Key != "" {
				return nil, fmt.Errorf("metadata %q: %w", kv.Key, err)
			}
			return nil, fmt.Errorf("metadata pair %d: %w", i, err)
		}
		if _, dup := f.kvIndex[kv.Key]; dup {
			return nil, fmt.Errorf("duplicate metadata key %q", kv.Key)
		}
		f.kvIndex[kv.Key] = len(f.kvs)
		f.kvs = append(f.kvs, kv)
	}
	if v, ok := f.Value("general.alignment"); ok {
		a, ok := v.Uint()
		if !ok || a == 0 || a > MaxAlignment || a&(a-1) != 0 {
			return nil, fmt.Errorf("general.alignment %s is not a power of two in [1, %d]", v, MaxAlignment)
		}
		f.Alignment = int64(a)
	}

	if nTensors*minTensorInfoSz > uint64(b.remaining()) {
		return nil, fmt.Errorf("header declares %d tensors but only %d bytes follow", nTensors, b.remaining())
	}
	f.tensors = make([]*TensorInfo, 0, nTensors)
	f.tIndex = make(map[string]int, nTensors)
	for i := uint64(0); i < nTensors; i++ {
		ti, err := f.readTensorInfo(b)
		if err != nil {
			if ti != nil && ti.Name != "" {
				return nil, fmt.Errorf("tensor %q: %w", ti.Name, err)
			}
			return nil, fmt.Errorf("tensor info %d: %w", i, err)
		}
		if _, dup := f.tIndex[ti.Name]; dup {
			return nil, fmt.Errorf("duplicate tensor name %q", ti.Name)
		}
		f.tIndex[ti.Name] = len(f.tensors)
		f.tensors = append(f.tensors, ti)
	}
	f.DataOffset = alignUp(b.pos, f.Alignment)
	if nTensors > 0 && f.DataOffset > size {
		return nil, fmt.Errorf("tensor data section at offset %d starts past the end of the file (%d bytes)", f.DataOffset, size)
	}
	for _, ti := range f.tensors {
		if ti.Offset%f.Alignment != 0 {
			return nil, fmt.Errorf("tensor %q: offset %d is not a multiple of the alignment %d", ti.Name, ti.Offset, f.Alignment)
		}
		start := f.DataOffset + ti.Offset
		if ti.Offset > size || start > size || ti.Size > size-start {
			return nil, fmt.Errorf("tensor %q: data [%d,%d) outside file of %d bytes", ti.Name, satAdd(f.DataOffset, ti.Offset), satAdd(satAdd(f.DataOffset, ti.Offset), ti.Size), size)
		}
	}
	return f, nil
}

func (f *File) readKV(b *byteReader) (KV, error) {
	key, err := b.str(MaxKeyLen)
	if err != nil {
		return KV{}, fmt.Errorf("key: %w", err)
	}
	kv := KV{Key: key}
	t, err := b.u32()
	if err != nil {
		return kv, err
	}
	vt := ValueType(t)
	if !vt.valid() {
		return kv, fmt.Errorf("unknown value type %d", t)
	}
	v := Value{typ: vt, valid: true}
	switch vt {
	case TypeString:
		if v.str, err = b.str(MaxStringLen); err != nil {
			return kv, err
		}
	case TypeArray:
		if v.arr, err = f.readArray(b); err != nil {
			return kv, err
		}
	default:
		p, err := b.read(vt.size())
		if err != nil {
			return kv, err
		}
		v.bits = decodeScalar(vt, p)
		if vt == TypeBool && p[0] > 1 {
			return kv, fmt.Errorf("bool value %d is neither 0 nor 1", p[0])
		}
	}
	kv.Value = v
	return kv, nil
}

func decodeScalar(vt ValueType, p []byte) uint64 {
	switch vt {
	case TypeUint8, TypeBool:
		return uint64(p[0])
	case TypeInt8:
		return uint64(int64(int8(p[0])))
	case TypeUint16:
		return uint64(binary.LittleEndian.Uint16(p))
	case TypeInt16:
		return uint64(int64(int16(binary.LittleEndian.Uint16(p))))
	case TypeUint32, TypeFloat32:
		return uint64(binary.LittleEndian.Uint32(p))
	case TypeInt32:
		return uint64(int64(int32(binary.LittleEndian.Uint32(p))))
	}
	return binary.LittleEndian.Uint64(p)
}

// readArray records an array's position and skips over it; its elements are
// decoded on demand.
func (f *File) readArray(b *byteReader) (*array, error) {
	t, err := b.u32()
	if err != nil {
		return nil, err
	}
	et := ValueType(t)
	if !et.valid() {
		return nil, fmt.Errorf("array of unknown element type %d", t)
	}
	if et == TypeArray {
		return nil, errors.New("nested arrays are not supported")
	}
	n, err := b.u64()
	if err != nil {
		return nil, err
	}
	if n > MaxArrayLen {
		return nil, fmt.Errorf("array of %d elements exceeds the limit of %d", n, MaxArrayLen)
	}
	a := &array{r: f.r, elem: et, count: n, off: b.pos}
	if et == TypeString {
		if n*8 > uint64(b.remaining()) {
			return nil, fmt.Errorf("array of %d strings runs past the end of the file (%d bytes left)", n, b.remaining())
		}
		for i := uint64(0); i < n; i++ {
			if err := b.skipStr(MaxStringLen); err != nil {
				return nil, fmt.Errorf("array element %d: %w", i, err)
			}
		}
	} else {
		nb := n * uint64(et.size())
		if nb > uint64(b.remaining()) {
			return nil, fmt.Errorf("array of %d %s (%d bytes) runs past the end of the file (%d bytes left)", n, et, nb, b.remaining())
		}
		if et == TypeBool {
			// Check the bools now so accessors cannot meet an invalid one.
			for i := uint64(0); i < n; i++ {
				p, err := b.read(1)
				if err != nil {
					return nil, err
				}
				if p[0] > 1 {
					return nil, fmt.Errorf("array element %d: bool value %d is neither 0 nor 1", i, p[0])
				}
			}
		} else if err := b.skip(int64(nb)); err != nil {
			return nil, err
		}
	}
	a.nbytes = b.pos - a.off
	return a, nil
}

func (f *File) readTensorInfo(b *byteReader) (*TensorInfo, error) {
	name, err := b.str(MaxKeyLen)
	if err != nil {
		return nil, fmt.Errorf("name: %w", err)
	}
	ti := &TensorInfo{Name: name}
	nd, err := b.u32()
	if err != nil {
		return ti, err
	}
	if nd == 0 || nd > MaxDims {
		return ti, fmt.Errorf("%d dimensions (want 1 to %d)", nd, MaxDims)
	}
	ti.Dims = make([]uint64, nd)
	elems := uint64(1)
	for i := range ti.Dims {
		d, err := b.u64()
		if err != nil {
			return ti, err
		}
		if d == 0 || d > math.MaxInt64 {
			return ti, fmt.Errorf("dimension %d is %d (want > 0)", i, d)
		}
		hi, lo := bits.Mul64(elems, d)
		if hi != 0 || lo > math.MaxInt64 {
			return ti, fmt.Errorf("dimensions %v overflow the element count", ti.Dims[:i+1])
		}
		elems = lo
		ti.Dims[i] = d
	}
	t, err := b.u32()
	if err != nil {
		return ti, err
	}
	ti.Type = ggml.Type(t)
	if !ti.Type.Known() {
		return ti, fmt.Errorf("unknown tensor type %d", t)
	}
	bs, ts := uint64(ti.Type.BlockSize()), uint64(ti.Type.TypeSize())
	if ti.Dims[0]%bs != 0 {
		return ti, fmt.Errorf("row of %d elements is not a multiple of the %s block size %d", ti.Dims[0], ti.Type, bs)
	}
	hi, sz := bits.Mul64(elems/bs, ts)
	if hi != 0 || sz > math.MaxInt64 {
		return ti, fmt.Errorf("size of %v %s overflows", ti.Dims, ti.Type)
	}
	ti.Size = int64(sz)
	off, err := b.u64()
	if err != nil {
		return ti, err
	}
	if off > math.MaxInt64 {
		return ti, fmt.Errorf("offset %d is out of range", off)
	}
	ti.Offset = int64(off)
	return ti, nil
}

func alignUp(n, a int64) int64 { return (n + a - 1) / a * a }

// satAdd adds two non-negative int64s, saturating at MaxInt64 (for errors).
func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

func le32String(u uint32) string {
	var p [4]byte
	binary.LittleEndian.PutUint32(p[:], u)
	return string(p[:])
}

// Architecture returns general.architecture, or "" when it is absent.
func (f *File) Architecture() string {
	s, _ := f.String("general.architecture")
	return s
}

// Tensors returns the tensor infos in file order. Neither the slice nor the
// infos may be modified.
func (f *File) Tensors() []*TensorInfo { return f.tensors }

// Tensor returns the info of the tensor called name.
func (f *File) Tensor(name string) (*TensorInfo, bool) {
	i, ok := f.tIndex[name]
	if !ok {
		return nil, false
	}
	return f.tensors[i], true
}

// TensorOffset returns the absolute file offset of the tensor's data.
func (f *File) TensorOffset(t *TensorInfo) int64 { return f.DataOffset + t.Offset }

// TensorReader returns a reader over the data of the tensor called name.
func (f *File) TensorReader(name string) (*io.SectionReader, error) {
	t, ok := f.Tensor(name)
	if !ok {
		return nil, fmt.Errorf("gguf: no tensor %q", name)
	}
	return io.NewSectionReader(f.r, f.DataOffset+t.Offset, t.Size), nil
}

// ReadTensor reads the whole data of the tensor called name into a new slice.
func (f *File) ReadTensor(name string) ([]byte, error) {
	t, ok := f.Tensor(name)
	if !ok {
		return nil, fmt.Errorf("gguf: no tensor %q", name)
	}
	buf := make([]byte, t.Size)
	if n, err := f.r.ReadAt(buf, f.DataOffset+t.Offset); n < len(buf) {
		return nil, fmt.Errorf("gguf: reading tensor %q: %w", name, err)
	}
	return buf, nil
}

// ReaderAt returns the underlying reader (the open file for Open), for
// callers that issue their own reads at TensorOffset.
func (f *File) ReaderAt() io.ReaderAt { return f.r }
