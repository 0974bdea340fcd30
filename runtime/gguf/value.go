package gguf

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"strconv"
)

// ValueType is the GGUF metadata value type id (gguf_type in ggml).
type ValueType uint32

// GGUF metadata value types.
const (
	TypeUint8   ValueType = 0
	TypeInt8    ValueType = 1
	TypeUint16  ValueType = 2
	TypeInt16   ValueType = 3
	TypeUint32  ValueType = 4
	TypeInt32   ValueType = 5
	TypeFloat32 ValueType = 6
	TypeBool    ValueType = 7
	TypeString  ValueType = 8
	TypeArray   ValueType = 9
	TypeUint64  ValueType = 10
	TypeInt64   ValueType = 11
	TypeFloat64 ValueType = 12
)

var valueTypeNames = [...]string{
	TypeUint8: "uint8", TypeInt8: "int8", TypeUint16: "uint16", TypeInt16: "int16",
	TypeUint32: "uint32", TypeInt32: "int32", TypeFloat32: "float32", TypeBool: "bool",
	TypeString: "string", TypeArray: "array", TypeUint64: "uint64", TypeInt64: "int64",
	TypeFloat64: "float64",
}

// String returns the GGUF name of the type, e.g. "uint32".
func (t ValueType) String() string {
	if int(t) < len(valueTypeNames) {
		return valueTypeNames[t]
	}
	return fmt.Sprintf("type(%d)", uint32(t))
}

// valid reports whether t is a known value type.
func (t ValueType) valid() bool { return t <= TypeFloat64 }

// size returns the encoded size of a scalar of type t, or 0 for string and
// array (variable size).
func (t ValueType) size() int {
	switch t {
	case TypeUint8, TypeInt8, TypeBool:
		return 1
	case TypeUint16, TypeInt16:
		return 2
	case TypeUint32, TypeInt32, TypeFloat32:
		return 4
	case TypeUint64, TypeInt64, TypeFloat64:
		return 8
	}
	return 0
}

func (t ValueType) isInt() bool {
	switch t {
	case TypeUint8, TypeInt8, TypeUint16, TypeInt16, TypeUint32, TypeInt32, TypeUint64, TypeInt64:
		return true
	}
	return false
}

func (t ValueType) isSigned() bool {
	return t == TypeInt8 || t == TypeInt16 || t == TypeInt32 || t == TypeInt64
}

// KV is one metadata key-value pair.
type KV struct {
	Key   string
	Value Value
}

// Value is a GGUF metadata value. Scalars and strings are decoded when the
// file is parsed; arrays are decoded on demand from the file (they can hold a
// whole vocabulary), so array accessors return errors for I/O failures. The
// zero Value is invalid (Type returns TypeUint8 and Valid reports false).
type Value struct {
	typ   ValueType
	valid bool
	bits  uint64 // integer, bool and float scalars: the raw bits, sign-extended for signed ints
	str   string
	arr   *array
}

// array is a lazily decoded GGUF array: count elements of elem starting at
// absolute offset off of r, spanning nbytes bytes.
type array struct {
	r      io.ReaderAt
	elem   ValueType
	count  uint64
	off    int64
	nbytes int64
	mem    []byte // when non-nil, the raw encoded elements (writer-side values)
}

// Valid reports whether v holds a value (the zero Value does not).
func (v Value) Valid() bool { return v.valid }

// Type returns the value's type.
func (v Value) Type() ValueType { return v.typ }

// ArrayType returns the element type of an array value, or false.
func (v Value) ArrayType() (ValueType, bool) {
	if v.typ != TypeArray || v.arr == nil {
		return 0, false
	}
	return v.arr.elem, true
}

// Len returns the number of elements of an array value, or the byte length
// of a string value, and 0 for scalars.
func (v Value) Len() int {
	switch {
	case v.typ == TypeArray && v.arr != nil:
		return int(v.arr.count)
	case v.typ == TypeString:
		return len(v.str)
	}
	return 0
}

// Str returns the string held by a string value.
func (v Value) Str() (string, bool) {
	if !v.valid || v.typ != TypeString {
		return "", false
	}
	return v.str, true
}

// String returns a string value itself and a short printable form of any
// other value (e.g. "32", "[151936]string"), so it suits both fmt and
// callers that know the value is a string.
func (v Value) String() string {
	if !v.valid {
		return "<invalid>"
	}
	switch v.typ {
	case TypeString:
		return v.str
	case TypeBool:
		return strconv.FormatBool(v.bits != 0)
	case TypeFloat32, TypeFloat64:
		f, _ := v.Float()
		return strconv.FormatFloat(f, 'g', -1, 64)
	case TypeArray:
		return fmt.Sprintf("[%d]%s", v.arr.count, v.arr.elem)
	}
	if v.typ.isSigned() {
		return strconv.FormatInt(int64(v.bits), 10)
	}
	return strconv.FormatUint(v.bits, 10)
}

// Uint returns an integer value of any width as uint64, if it is non-negative.
func (v Value) Uint() (uint64, bool) {
	if !v.valid || !v.typ.isInt() {
		return 0, false
	}
	if v.typ.isSigned() && int64(v.bits) < 0 {
		return 0, false
	}
	return v.bits, true
}

// Int returns an integer value of any width as int64, if it fits.
func (v Value) Int() (int64, bool) {
	if !v.valid || !v.typ.isInt() {
		return 0, false
	}
	if !v.typ.isSigned() && v.bits > math.MaxInt64 {
		return 0, false
	}
	return int64(v.bits), true
}

// Float returns a float32 or float64 value as float64.
func (v Value) Float() (float64, bool) {
	if !v.valid {
		return 0, false
	}
	switch v.typ {
	case TypeFloat32:
		return float64(math.Float32frombits(uint32(v.bits))), true
	case TypeFloat64:
		return math.Float64frombits(v.bits), true
	}
	return 0, false
}

// Bool returns a bool value.
func (v Value) Bool() (bool, bool) {
	if !v.valid || v.typ != TypeBool {
		return false, false
	}
	return v.bits != 0, true
}

// raw returns the encoded bytes of the array's elements.
func (a *array) raw() ([]byte, error) {
	if a.mem != nil {
		return a.mem, nil
	}
	buf := make([]byte, a.nbytes)
	if n, err := a.r.ReadAt(buf, a.off); n < len(buf) {
		return nil, fmt.Errorf("reading array at offset %d: %w", a.off, err)
	}
	return buf, nil
}

// Strings returns the elements of a string array.
func (v Value) Strings() ([]string, error) {
	if !v.valid || v.typ != TypeArray || v.arr.elem != TypeString {
		return nil, fmt.Errorf("is %s, not an array of string", v.describe())
	}
	buf, err := v.arr.raw()
	if err != nil {
		return nil, err
	}
	out := make([]string, v.arr.count)
	p := 0
	for i := range out {
		if len(buf)-p < 8 {
			return nil, fmt.Errorf("string array element %d truncated", i)
		}
		n := binary.LittleEndian.Uint64(buf[p:])
		p += 8
		if n > uint64(len(buf)-p) {
			return nil, fmt.Errorf("string array element %d of %d bytes overruns the array", i, n)
		}
		out[i] = string(buf[p : p+int(n)])
		p += int(n)
	}
	return out, nil
}

// numeric decodes an integer or float array element by element.
func (v Value) numeric(want string, accept func(ValueType) bool, each func(i int, bits uint64, t ValueType) error) error {
	if !v.valid || v.typ != TypeArray || !accept(v.arr.elem) {
		return fmt.Errorf("is %s, not an array of %s", v.describe(), want)
	}
	buf, err := v.arr.raw()
	if err != nil {
		return err
	}
	es := v.arr.elem.size()
	t := v.arr.elem
	for i := 0; i < int(v.arr.count); i++ {
		b := buf[i*es : i*es+es]
		var bits uint64
		switch es {
		case 1:
			bits = uint64(b[0])
			if t == TypeInt8 {
				bits = uint64(int64(int8(b[0])))
			}
		case 2:
			u := binary.LittleEndian.Uint16(b)
			bits = uint64(u)
			if t == TypeInt16 {
				bits = uint64(int64(int16(u)))
			}
		case 4:
			u := binary.LittleEndian.Uint32(b)
			bits = uint64(u)
			if t == TypeInt32 {
				bits = uint64(int64(int32(u)))
			}
		case 8:
			bits = binary.LittleEndian.Uint64(b)
		}
		if err := each(i, bits, t); err != nil {
			return err
		}
	}
	return nil
}

// Int32s returns the elements of an integer array (any width) as int32; it
// fails when an element does not fit.
func (v Value) Int32s() ([]int32, error) {
	var out []int32
	if v.valid && v.typ == TypeArray {
		out = make([]int32, 0, v.arr.count)
	}
	err := v.numeric("integer", ValueType.isInt, func(i int, bits uint64, t ValueType) error {
		x := int64(bits)
		if (!t.isSigned() && bits > math.MaxInt32) || x < math.MinInt32 || x > math.MaxInt32 {
			return fmt.Errorf("array element %d does not fit in int32", i)
		}
		out = append(out, int32(x))
		return nil
	})
	return out, err
}

// Int64s returns the elements of an integer array (any width) as int64; it
// fails when a uint64 element exceeds MaxInt64.
func (v Value) Int64s() ([]int64, error) {
	var out []int64
	if v.valid && v.typ == TypeArray {
		out = make([]int64, 0, v.arr.count)
	}
	err := v.numeric("integer", ValueType.isInt, func(i int, bits uint64, t ValueType) error {
		if !t.isSigned() && bits > math.MaxInt64 {
			return fmt.Errorf("array element %d does not fit in int64", i)
		}
		out = append(out, int64(bits))
		return nil
	})
	return out, err
}

// Float32s returns the elements of a float32 or float64 array as float32.
func (v Value) Float32s() ([]float32, error) {
	var out []float32
	if v.valid && v.typ == TypeArray {
		out = make([]float32, 0, v.arr.count)
	}
	isFloat := func(t ValueType) bool { return t == TypeFloat32 || t == TypeFloat64 }
	err := v.numeric("float", isFloat, func(_ int, bits uint64, t ValueType) error {
		if t == TypeFloat32 {
			out = append(out, math.Float32frombits(uint32(bits)))
		} else {
			out = append(out, float32(math.Float64frombits(bits)))
		}
		return nil
	})
	return out, err
}

// Bools returns the elements of a bool array.
func (v Value) Bools() ([]bool, error) {
	var out []bool
	if v.valid && v.typ == TypeArray {
		out = make([]bool, 0, v.arr.count)
	}
	err := v.numeric("bool", func(t ValueType) bool { return t == TypeBool }, func(_ int, bits uint64, _ ValueType) error {
		out = append(out, bits != 0)
		return nil
	})
	return out, err
}

// describe names the value's type for error messages, e.g. "uint32" or
// "array of string".
func (v Value) describe() string {
	if !v.valid {
		return "missing"
	}
	if v.typ == TypeArray {
		return "array of " + v.arr.elem.String()
	}
	return v.typ.String()
}
