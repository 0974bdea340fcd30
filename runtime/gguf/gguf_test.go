package gguf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/lesfarm/lesfarm/runtime/tensor"
)

// testTensor is a tensor for the round-trip tests with deterministic data.
type testTensor struct {
	name string
	typ  tensor.Type
	dims []uint64
}

func tensorData(t testing.TB, tt testTensor) []byte {
	t.Helper()
	size, err := TensorSize(tt.typ, tt.dims)
	if err != nil {
		t.Fatal(err)
	}
	p := make([]byte, size)
	for i := range p {
		p[i] = byte(i*7 + len(tt.name))
	}
	return p
}

// sampleFile writes a small GGUF with metadata of every type and a few
// tensors, and returns its bytes.
func sampleFile(t testing.TB, align int64) ([]byte, []testTensor) {
	t.Helper()
	var buf bytes.Buffer
	w := NewWriter(&buf)
	if align != 0 {
		w.SetAlignment(align)
	}
	kvs := []struct {
		k string
		v any
	}{
		{"general.architecture", "qwen3moe"},
		{"general.name", "sample ünïcode"},
		{"u8", uint8(200)}, {"i8", int8(-100)}, {"u16", uint16(60000)}, {"i16", int16(-30000)},
		{"u32", uint32(4000000000)}, {"i32", int32(-2000000000)}, {"u64", uint64(1 << 63)},
		{"i64", int64(-1 << 62)}, {"f32", float32(1e-6)}, {"f64", 3.25}, {"b", true},
		{"int", 7}, {"bigint", bigInt()},
		{"strs", []string{"a", "", "Ġhello", "<|im_end|>"}},
		{"i32s", []int32{1, -2, 3}}, {"u32s", []uint32{4, 5}}, {"f32s", []float32{0.5, -1.5}},
		{"f64s", []float64{2.5}}, {"u8s", []uint8{1, 2, 3}}, {"i64s", []int64{-9}},
		{"bools", []bool{true, false}}, {"ints", []int{1, 2}}, {"empty", []string{}},
	}
	for _, kv := range kvs {
		if err := w.AddKV(kv.k, kv.v); err != nil {
			t.Fatal(err)
		}
	}
	tensors := []testTensor{
		{"token_embd.weight", tensor.F32, []uint64{8, 3}},
		{"blk.0.ffn_gate_exps.weight", tensor.Q4_K, []uint64{256, 2, 3}},
		{"blk.0.attn_q.weight", tensor.Q8_0, []uint64{64, 5}},
		{"odd.weight", tensor.F16, []uint64{3}},
		{"last.weight", tensor.Q6_K, []uint64{256, 1, 1, 2}},
	}
	for _, tt := range tensors {
		if err := w.AddTensor(tt.name, tt.typ, tt.dims); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.WriteHeader(); err != nil {
		t.Fatal(err)
	}
	for _, tt := range tensors {
		if err := w.WriteTensorData(tt.name, bytes.NewReader(tensorData(t, tt))); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), tensors
}

// bigInt returns an int above MaxInt32 on 64-bit platforms (the Writer
// stores it as int64) and an int64 elsewhere.
func bigInt() any {
	if strconv.IntSize == 64 {
		x := 1
		return x << 40
	}
	return int64(1 << 40)
}

func parseBytes(t testing.TB, p []byte) *File {
	t.Helper()
	f, err := Parse(bytes.NewReader(p), int64(len(p)))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestRoundTrip(t *testing.T) {
	for _, align := range []int64{0, 32, 64, 4096} {
		p, tensors := sampleFile(t, align)
		f := parseBytes(t, p)
		want := align
		if want == 0 {
			want = 32
		}
		if f.Alignment != want || f.Version != 3 || f.Size != int64(len(p)) || f.DataOffset%want != 0 {
			t.Fatalf("align %d: got alignment %d version %d size %d data offset %d", align, f.Alignment, f.Version, f.Size, f.DataOffset)
		}
		if got := f.Has("general.alignment"); got != (want != 32) {
			t.Errorf("align %d: general.alignment present = %v", align, got)
		}
		if f.Architecture() != "qwen3moe" {
			t.Errorf("architecture %q", f.Architecture())
		}
		if s, err := f.String("general.name"); err != nil || s != "sample ünïcode" {
			t.Errorf("general.name %q %v", s, err)
		}
		uints := map[string]uint64{"u8": 200, "u16": 60000, "u32": 4000000000, "u64": 1 << 63, "int": 7, "bigint": 1 << 40}
		for k, v := range uints {
			if got, err := f.Uint(k); err != nil || got != v {
				t.Errorf("Uint(%s) = %d, %v; want %d", k, got, err, v)
			}
		}
		ints := map[string]int64{"i8": -100, "i16": -30000, "i32": -2000000000, "i64": -1 << 62, "u32": 4000000000}
		for k, v := range ints {
			if got, err := f.Int(k); err != nil || got != v {
				t.Errorf("Int(%s) = %d, %v; want %d", k, got, err, v)
			}
		}
		if v, _ := f.Value("int"); v.Type() != TypeInt32 {
			t.Errorf("int written as %s, want int32", v.Type())
		}
		if v, _ := f.Value("bigint"); v.Type() != TypeInt64 {
			t.Errorf("big int written as %s, want int64", v.Type())
		}
		if x, err := f.Float("f32"); err != nil || float32(x) != 1e-6 {
			t.Errorf("f32 %v %v", x, err)
		}
		if x, err := f.Float("f64"); err != nil || x != 3.25 {
			t.Errorf("f64 %v %v", x, err)
		}
		if x, err := f.Bool("b"); err != nil || !x {
			t.Errorf("b %v %v", x, err)
		}
		if s, err := f.Strings("strs"); err != nil || !reflect.DeepEqual(s, []string{"a", "", "Ġhello", "<|im_end|>"}) {
			t.Errorf("strs %q %v", s, err)
		}
		if s, err := f.Strings("empty"); err != nil || len(s) != 0 {
			t.Errorf("empty %q %v", s, err)
		}
		if s, err := f.Int32s("i32s"); err != nil || !reflect.DeepEqual(s, []int32{1, -2, 3}) {
			t.Errorf("i32s %v %v", s, err)
		}
		if s, err := f.Int32s("u32s"); err != nil || !reflect.DeepEqual(s, []int32{4, 5}) {
			t.Errorf("u32s as int32 %v %v", s, err)
		}
		if s, err := f.Int32s("u8s"); err != nil || !reflect.DeepEqual(s, []int32{1, 2, 3}) {
			t.Errorf("u8s as int32 %v %v", s, err)
		}
		if s, err := f.Int64s("i64s"); err != nil || !reflect.DeepEqual(s, []int64{-9}) {
			t.Errorf("i64s %v %v", s, err)
		}
		if s, err := f.Int32s("ints"); err != nil || !reflect.DeepEqual(s, []int32{1, 2}) {
			t.Errorf("ints %v %v", s, err)
		}
		if s, err := f.Float32s("f32s"); err != nil || !reflect.DeepEqual(s, []float32{0.5, -1.5}) {
			t.Errorf("f32s %v %v", s, err)
		}
		if s, err := f.Float32s("f64s"); err != nil || !reflect.DeepEqual(s, []float32{2.5}) {
			t.Errorf("f64s %v %v", s, err)
		}
		v, _ := f.Value("bools")
		if s, err := v.Bools(); err != nil || !reflect.DeepEqual(s, []bool{true, false}) {
			t.Errorf("bools %v %v", s, err)
		}
		if got := len(f.Tensors()); got != len(tensors) {
			t.Fatalf("%d tensors, want %d", got, len(tensors))
		}
		for i, tt := range tensors {
			ti := f.Tensors()[i]
			if ti.Name != tt.name || ti.Type != tt.typ || !reflect.DeepEqual(ti.Dims, tt.dims) || ti.Offset%want != 0 {
				t.Errorf("tensor %d = %+v, want %+v", i, ti, tt)
			}
			got, err := f.ReadTensor(tt.name)
			if err != nil || !bytes.Equal(got, tensorData(t, tt)) {
				t.Errorf("tensor %q data differs (%v)", tt.name, err)
			}
			if ti2, ok := f.Tensor(tt.name); !ok || ti2 != ti {
				t.Errorf("Tensor(%q) lookup failed", tt.name)
			}
		}
		if ti, _ := f.Tensor("blk.0.ffn_gate_exps.weight"); ti.Elements() != 256*2*3 || ti.Size != 6*144 {
			t.Errorf("exps: %d elements, %d bytes", ti.Elements(), ti.Size)
		}
		last := f.Tensors()[len(f.Tensors())-1]
		if end := alignUp(f.DataOffset+last.Offset+last.Size, f.Alignment); end != f.Size {
			t.Errorf("file is %d bytes, want %d (data end padded to alignment)", f.Size, end)
		}
	}
}

// TestCopy re-writes a parsed file from its Values and tensor readers; the
// result must be byte-identical, which is what pack and quantize rely on.
func TestCopy(t *testing.T) {
	p, _ := sampleFile(t, 64)
	f := parseBytes(t, p)
	var out bytes.Buffer
	w := NewWriter(&out)
	for _, kv := range f.KVs() {
		if err := w.AddKV(kv.Key, kv.Value); err != nil {
			t.Fatal(err)
		}
	}
	for _, ti := range f.Tensors() {
		if err := w.AddTensor(ti.Name, ti.Type, ti.Dims); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.WriteHeader(); err != nil {
		t.Fatal(err)
	}
	if w.HeaderSize() != f.DataOffset {
		t.Errorf("HeaderSize %d, want %d", w.HeaderSize(), f.DataOffset)
	}
	for _, ti := range f.Tensors() {
		r, err := f.TensorReader(ti.Name)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.WriteTensorData(ti.Name, r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), p) {
		t.Fatalf("copy differs from original (%d vs %d bytes)", out.Len(), len(p))
	}
}

func TestAccessorErrors(t *testing.T) {
	p, _ := sampleFile(t, 0)
	f := parseBytes(t, p)
	tests := []struct {
		name string
		call func() error
		want string
	}{
		{"missing string", func() error { _, err := f.String("nope"); return err }, `metadata key "nope" is missing`},
		{"string wrong type", func() error { _, err := f.String("u32"); return err }, `metadata key "u32" is uint32, want string`},
		{"uint negative", func() error { _, err := f.Uint("i8"); return err }, `"i8" is negative`},
		{"uint from float", func() error { _, err := f.Uint("f32"); return err }, `"f32" is float32, want an unsigned integer`},
		{"int too big", func() error { _, err := f.Int("u64"); return err }, `does not fit int64`},
		{"float from int", func() error { _, err := f.Float("u8"); return err }, `want a float`},
		{"bool from string", func() error { _, err := f.Bool("general.name"); return err }, `want bool`},
		{"strings from ints", func() error { _, err := f.Strings("i32s"); return err }, `"i32s": is array of int32, not an array of string`},
		{"int32s from strings", func() error { _, err := f.Int32s("strs"); return err }, `not an array of integer`},
		{"int64s from strings", func() error { _, err := f.Int64s("strs"); return err }, `not an array of integer`},
		{"float32s from scalar", func() error { _, err := f.Float32s("f32"); return err }, `is float32, not an array of float`},
		{"missing array", func() error { _, err := f.Int32s("nope"); return err }, `"nope" is missing`},
		{"missing tensor", func() error { _, err := f.ReadTensor("nope"); return err }, `no tensor "nope"`},
		{"missing tensor reader", func() error { _, err := f.TensorReader("nope"); return err }, `no tensor "nope"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if tc.want == "" {
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "gguf: ") {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestWriterErrors(t *testing.T) {
	tests := []struct {
		name string
		run  func(w *Writer) error
		want string
	}{
		{"bad alignment", func(w *Writer) error { w.SetAlignment(48); return w.WriteHeader() }, "not a power of two"},
		{"bad alignment kv", func(w *Writer) error { return w.AddKV("general.alignment", uint32(0)) }, "not a power of two"},
		{"dup key", func(w *Writer) error { w.AddKV("a", 1); return w.AddKV("a", 2) }, `duplicate metadata key "a"`},
		{"unsupported value", func(w *Writer) error { return w.AddKV("a", struct{}{}) }, "unsupported value type"},
		{"dup tensor", func(w *Writer) error {
			w.AddTensor("t", tensor.F32, []uint64{1})
			return w.AddTensor("t", tensor.F32, []uint64{1})
		}, `duplicate tensor "t"`},
		{"zero dim", func(w *Writer) error { return w.AddTensor("t", tensor.F32, []uint64{2, 0}) }, "dimension 1 is 0"},
		{"five dims", func(w *Writer) error { return w.AddTensor("t", tensor.F32, []uint64{1, 1, 1, 1, 1}) }, "5 dimensions"},
		{"block multiple", func(w *Writer) error { return w.AddTensor("t", tensor.Q4_K, []uint64{128}) }, "not a multiple of the Q4_K block size 256"},
		{"unknown type", func(w *Writer) error { return w.AddTensor("t", tensor.Type(99), []uint64{1}) }, "unknown tensor type"},
		{"overflow", func(w *Writer) error { return w.AddTensor("t", tensor.F32, []uint64{1 << 32, 1 << 32}) }, "overflow"},
		{"short data", func(w *Writer) error {
			w.AddTensor("t", tensor.F32, []uint64{4})
			w.WriteHeader()
			return w.WriteTensorData("t", bytes.NewReader(make([]byte, 15)))
		}, `tensor "t": data has 15 bytes, want 16`},
		{"out of order", func(w *Writer) error {
			w.AddTensor("a", tensor.F32, []uint64{4})
			w.AddTensor("b", tensor.F32, []uint64{4})
			w.WriteHeader()
			return w.WriteTensor("b", make([]byte, 16))
		}, `next is "a"`},
		{"missing tensor at close", func(w *Writer) error {
			w.AddTensor("a", tensor.F32, []uint64{4})
			w.AddTensor("b", tensor.F32, []uint64{4})
			w.WriteHeader()
			w.WriteTensor("a", make([]byte, 16))
			return w.Close()
		}, `1 of 2 tensors not written, first "b"`},
		{"close before header", func(w *Writer) error { return w.Close() }, "before WriteHeader"},
		{"kv after header", func(w *Writer) error { w.WriteHeader(); return w.AddKV("a", 1) }, "after WriteHeader"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.run(NewWriter(&bytes.Buffer{}))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

type failWriter struct{ left int }

func (f *failWriter) Write(p []byte) (int, error) {
	if len(p) > f.left {
		n := f.left
		f.left = 0
		return n, errors.New("disk full")
	}
	f.left -= len(p)
	return len(p), nil
}

func TestWriterPropagatesWriteError(t *testing.T) {
	w := NewWriter(&failWriter{left: 200})
	w.AddKV("general.architecture", "x")
	w.AddTensor("t", tensor.F32, []uint64{64})
	if err := w.WriteHeader(); err != nil {
		t.Fatal(err)
	}
	err := w.WriteTensor("t", make([]byte, 256))
	if err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("got %v, want disk full", err)
	}
	if err := w.Close(); err == nil {
		t.Fatal("Close after a failed write returned nil")
	}
}

// TestTruncated cuts a valid file at every byte up to the end of its last
// tensor's data: each prefix must fail with an error, never panic.
func TestTruncated(t *testing.T) {
	p, _ := sampleFile(t, 0)
	f := parseBytes(t, p)
	last := f.Tensors()[len(f.Tensors())-1]
	end := f.DataOffset + last.Offset + last.Size
	for n := int64(0); n < end; n++ {
		if _, err := Parse(bytes.NewReader(p[:n]), n); err == nil {
			t.Fatalf("prefix of %d bytes (of %d) parsed without error", n, len(p))
		}
	}
	// The trailing padding after the last tensor is optional.
	if _, err := Parse(bytes.NewReader(p[:end]), end); err != nil {
		t.Fatalf("file without trailing padding: %v", err)
	}
}

// raw builds hand-made GGUF bytes for the hostile-input tests.
type raw struct{ bytes.Buffer }

func (r *raw) u32(v uint32) *raw { r.Write(binary.LittleEndian.AppendUint32(nil, v)); return r }
func (r *raw) u64(v uint64) *raw { r.Write(binary.LittleEndian.AppendUint64(nil, v)); return r }
func (r *raw) str(s string) *raw { r.u64(uint64(len(s))); r.WriteString(s); return r }
func (r *raw) header(nt, nkv uint64) *raw {
	return r.u32(Magic).u32(3).u64(nt).u64(nkv)
}
func (r *raw) pad(a int) *raw {
	for r.Len()%a != 0 {
		r.WriteByte(0)
	}
	return r
}

// tinfo appends a tensor info.
func (r *raw) tinfo(name string, typ uint32, off uint64, dims ...uint64) *raw {
	r.str(name).u32(uint32(len(dims)))
	for _, d := range dims {
		r.u64(d)
	}
	return r.u32(typ).u64(off)
}

func TestHostile(t *testing.T) {
	tests := []struct {
		name string
		file func() []byte
		want string
	}{
		{"empty", func() []byte { return nil }, "too short for a GGUF header"},
		{"bad magic", func() []byte { return []byte("GGML\x03\x00\x00\x00") }, `not a GGUF file (magic "GGML"`},
		{"version 1", func() []byte { return new(raw).u32(Magic).u32(1).u64(0).u64(0).Bytes() }, "unsupported GGUF version 1"},
		{"big endian", func() []byte { return new(raw).u32(Magic).u32(3 << 24).u64(0).u64(0).Bytes() }, "big-endian"},
		{"huge kv count", func() []byte { return new(raw).header(0, 1<<40).Bytes() }, "more than the limit"},
		{"kv count vs size", func() []byte { return new(raw).header(0, 1000).Bytes() }, "declares 1000 metadata pairs but only 0 bytes follow"},
		{"huge tensor count", func() []byte { return new(raw).header(1<<40, 0).Bytes() }, "tensors, more than the limit"},
		{"tensor count vs size", func() []byte { return new(raw).header(1000, 0).Bytes() }, "declares 1000 tensors but only 0 bytes follow"},
		{"huge key", func() []byte { return new(raw).header(0, 1).u64(1 << 62).u64(0).Bytes() }, "exceeds the limit"},
		{"key past end", func() []byte { return new(raw).header(0, 1).u64(1000).u64(0).Bytes() }, "runs past the end of the file"},
		{"huge string value", func() []byte {
			return new(raw).header(0, 1).str("k").u32(uint32(TypeString)).u64(1 << 40).Bytes()
		}, `metadata "k": string of 1099511627776 bytes exceeds the limit`},
		{"string past end", func() []byte {
			return new(raw).header(0, 1).str("k").u32(uint32(TypeString)).u64(100).u64(0).Bytes()
		}, "runs past the end of the file"},
		{"unknown value type", func() []byte { return new(raw).header(0, 1).str("k").u32(13).u64(0).Bytes() }, `metadata "k": unknown value type 13`},
		{"huge array", func() []byte {
			return new(raw).header(0, 1).str("k").u32(uint32(TypeArray)).u32(uint32(TypeUint64)).u64(1 << 60).Bytes()
		}, "exceeds the limit"},
		{"array past end", func() []byte {
			return new(raw).header(0, 1).str("k").u32(uint32(TypeArray)).u32(uint32(TypeUint64)).u64(1 << 20).u64(0).Bytes()
		}, "runs past the end of the file"},
		{"string array past end", func() []byte {
			return new(raw).header(0, 1).str("k").u32(uint32(TypeArray)).u32(uint32(TypeString)).u64(1 << 20).u64(0).Bytes()
		}, "array of 1048576 strings runs past the end"},
		{"string array element past end", func() []byte {
			return new(raw).header(0, 1).str("k").u32(uint32(TypeArray)).u32(uint32(TypeString)).u64(2).str("a").u64(1 << 20).u64(0).Bytes()
		}, "array element 1: string of 1048576 bytes"},
		{"nested array", func() []byte {
			return new(raw).header(0, 1).str("k").u32(uint32(TypeArray)).u32(uint32(TypeArray)).u64(1).u64(0).Bytes()
		}, "nested arrays"},
		{"bad bool", func() []byte { return new(raw).header(0, 1).str("k").u32(uint32(TypeBool)).u32(7).Bytes() }, "bool value 7"},
		{"duplicate key", func() []byte {
			r := new(raw).header(0, 2).str("k").u32(uint32(TypeUint8))
			r.WriteByte(0)
			r.str("k").u32(uint32(TypeUint8)).WriteByte(0)
			return r.Bytes()
		}, `duplicate metadata key "k"`},
		{"bad alignment", func() []byte {
			return new(raw).header(0, 1).str("general.alignment").u32(uint32(TypeUint32)).u32(48).Bytes()
		}, "general.alignment 48 is not a power of two"},
		{"alignment string", func() []byte {
			return new(raw).header(0, 1).str("general.alignment").u32(uint32(TypeString)).str("32").Bytes()
		}, "not a power of two"},
		{"zero dims", func() []byte { return new(raw).header(1, 0).tinfo("x", 0, 0).pad(32).u64(0).Bytes() }, `tensor "x": 0 dimensions`},
		{"five dims", func() []byte {
			return new(raw).header(1, 0).tinfo("x", 0, 0, 1, 1, 1, 1, 1).pad(32).u64(0).Bytes()
		}, `tensor "x": 5 dimensions`},
		{"zero dim", func() []byte { return new(raw).header(1, 0).tinfo("x", 0, 0, 4, 0).pad(32).u64(0).Bytes() }, `tensor "x": dimension 1 is 0`},
		{"dim overflow", func() []byte {
			return new(raw).header(1, 0).tinfo("x", 0, 0, 1<<32, 1<<32).pad(32).u64(0).Bytes()
		}, "overflow"},
		{"size overflow", func() []byte {
			return new(raw).header(1, 0).tinfo("x", 0, 0, 1<<62).pad(32).u64(0).Bytes()
		}, "overflows"},
		{"unknown type", func() []byte { return new(raw).header(1, 0).tinfo("x", 99, 0, 4).pad(32).u64(0).Bytes() }, `tensor "x": unknown tensor type 99`},
		{"block multiple", func() []byte {
			return new(raw).header(1, 0).tinfo("x", uint32(tensor.Q8_0), 0, 33).pad(32).u64(0).Bytes()
		}, "not a multiple of the Q8_0 block size 32"},
		{"misaligned offset", func() []byte {
			return new(raw).header(1, 0).tinfo("x", 0, 4, 1).pad(32).u64(0).Bytes()
		}, `tensor "x": offset 4 is not a multiple of the alignment 32`},
		{"data outside file", func() []byte {
			return new(raw).header(1, 0).tinfo("x", 0, 0, 16).pad(32).u64(0).Bytes()
		}, `gguf: tensor "x": data [64,128) outside file of 72 bytes`},
		{"offset far outside", func() []byte {
			return new(raw).header(1, 0).tinfo("x", 0, 1<<62, 1).pad(32).Bytes()
		}, "outside file of"},
		{"huge offset", func() []byte {
			return new(raw).header(1, 0).tinfo("x", 0, 1<<63+32, 1).pad(32).Bytes()
		}, "out of range"},
		{"duplicate tensor", func() []byte {
			return new(raw).header(2, 0).tinfo("x", 0, 0, 1).tinfo("x", 0, 32, 1).pad(32).Bytes()
		}, `duplicate tensor name "x"`},
		{"tensor name past end", func() []byte { return new(raw).header(1, 0).u64(1 << 15).pad(64).Bytes() }, "tensor info 0: name: string of 32768 bytes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.file()
			f, err := Parse(bytes.NewReader(p), int64(len(p)))
			if err == nil {
				t.Fatalf("parsed %+v without error", f)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "gguf: ") || strings.Contains(err.Error(), "\n") {
				t.Errorf("error %q, want a one-line gguf error containing %q", err, tc.want)
			}
		})
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.gguf")
	if _, err := Open(missing); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("missing file: %v", err)
	}
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "is a directory") {
		t.Errorf("directory: %v", err)
	}
	bad := filepath.Join(dir, "bad.gguf")
	os.WriteFile(bad, []byte("not a model at all"), 0o644)
	if _, err := Open(bad); err == nil || !strings.Contains(err.Error(), bad+": not a GGUF file") {
		t.Errorf("bad file: %v", err)
	}
	good := filepath.Join(dir, "good.gguf")
	p, _ := sampleFile(t, 0)
	os.WriteFile(good, p, 0o644)
	f, err := Open(good)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.ReadTensor("token_embd.weight"); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestValueString(t *testing.T) {
	p, _ := sampleFile(t, 0)
	f := parseBytes(t, p)
	want := map[string]string{"u8": "200", "i8": "-100", "f64": "3.25", "b": "true", "strs": "[4]string", "general.architecture": "qwen3moe"}
	for k, w := range want {
		v, ok := f.Value(k)
		if !ok || v.String() != w {
			t.Errorf("%s: %q, want %q", k, v.String(), w)
		}
	}
	if (Value{}).Valid() || (Value{}).String() != "<invalid>" {
		t.Error("zero Value should be invalid")
	}
	if _, ok := (Value{}).Uint(); ok {
		t.Error("zero Value Uint ok")
	}
	if v, _ := f.Value("f32"); v.Len() != 0 {
		t.Error("scalar Len != 0")
	}
	if v, _ := f.Value("strs"); v.Len() != 4 {
		t.Error("array Len != 4")
	}
}
