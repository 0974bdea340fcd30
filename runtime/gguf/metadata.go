package gguf

import "fmt"

// KVs returns the metadata pairs in file order. The slice must not be modified.
func (f *File) KVs() []KV { return f.kvs }

// Has reports whether the metadata holds key.
func (f *File) Has(key string) bool { _, ok := f.kvIndex[key]; return ok }

// Value returns the metadata value of key.
func (f *File) Value(key string) (Value, bool) {
	i, ok := f.kvIndex[key]
	if !ok {
		return Value{}, false
	}
	return f.kvs[i].Value, true
}

func (f *File) lookup(key string) (Value, error) {
	v, ok := f.Value(key)
	if !ok {
		return Value{}, fmt.Errorf("gguf: metadata key %q is missing", key)
	}
	return v, nil
}

func wrongType(key string, v Value, want string) error {
	return fmt.Errorf("gguf: metadata key %q is %s, want %s", key, v.describe(), want)
}

// String returns the string value of key; the error names the key when it is
// missing or not a string.
func (f *File) String(key string) (string, error) {
	v, err := f.lookup(key)
	if err != nil {
		return "", err
	}
	s, ok := v.Str()
	if !ok {
		return "", wrongType(key, v, "string")
	}
	return s, nil
}

// Uint returns the value of key, which may be any non-negative integer type.
func (f *File) Uint(key string) (uint64, error) {
	v, err := f.lookup(key)
	if err != nil {
		return 0, err
	}
	u, ok := v.Uint()
	if !ok {
		if v.typ.isInt() {
			return 0, fmt.Errorf("gguf: metadata key %q is negative (%s)", key, v)
		}
		return 0, wrongType(key, v, "an unsigned integer")
	}
	return u, nil
}

// Int returns the value of key, which may be any integer type that fits int64.
func (f *File) Int(key string) (int64, error) {
	v, err := f.lookup(key)
	if err != nil {
		return 0, err
	}
	i, ok := v.Int()
	if !ok {
		if v.typ.isInt() {
			return 0, fmt.Errorf("gguf: metadata key %q value %s does not fit int64", key, v)
		}
		return 0, wrongType(key, v, "an integer")
	}
	return i, nil
}

// Float returns the float32 or float64 value of key as float64.
func (f *File) Float(key string) (float64, error) {
	v, err := f.lookup(key)
	if err != nil {
		return 0, err
	}
	x, ok := v.Float()
	if !ok {
		return 0, wrongType(key, v, "a float")
	}
	return x, nil
}

// Bool returns the bool value of key.
func (f *File) Bool(key string) (bool, error) {
	v, err := f.lookup(key)
	if err != nil {
		return false, err
	}
	x, ok := v.Bool()
	if !ok {
		return false, wrongType(key, v, "bool")
	}
	return x, nil
}

func (f *File) arrayOf(key string, get func(Value) error) error {
	v, err := f.lookup(key)
	if err != nil {
		return err
	}
	if err := get(v); err != nil {
		return fmt.Errorf("gguf: metadata key %q: %w", key, err)
	}
	return nil
}

// Strings returns the string array value of key.
func (f *File) Strings(key string) (out []string, err error) {
	err = f.arrayOf(key, func(v Value) (e error) { out, e = v.Strings(); return })
	return out, err
}

// Int32s returns the integer array value of key as int32s.
func (f *File) Int32s(key string) (out []int32, err error) {
	err = f.arrayOf(key, func(v Value) (e error) { out, e = v.Int32s(); return })
	return out, err
}

// Int64s returns the integer array value of key as int64s.
func (f *File) Int64s(key string) (out []int64, err error) {
	err = f.arrayOf(key, func(v Value) (e error) { out, e = v.Int64s(); return })
	return out, err
}

// Float32s returns the float array value of key as float32s.
func (f *File) Float32s(key string) (out []float32, err error) {
	err = f.arrayOf(key, func(v Value) (e error) { out, e = v.Float32s(); return })
	return out, err
}
