// Package ggml names the ggml tensor types that GGUF files store and their
// block layouts (elements and bytes per block). It is a leaf: the GGUF
// reader and the tensor kernels both use it, so reading a file's header
// does not link the kernels.
package ggml

import (
	"fmt"
	"math"
)

// Type is a ggml tensor type id, as stored in GGUF tensor infos.
type Type uint32

// ggml type ids (ggml.h). Only the ones with kernels are usable for compute;
// the others are named so errors can say what a file contains.
const (
	F32  Type = 0
	F16  Type = 1
	Q4_0 Type = 2
	Q4_1 Type = 3
	Q5_0 Type = 6
	Q5_1 Type = 7
	Q8_0 Type = 8
	Q8_1 Type = 9
	Q2_K Type = 10
	Q3_K Type = 11
	Q4_K Type = 12
	Q5_K Type = 13
	Q6_K Type = 14
	Q8_K Type = 15
	I8   Type = 24
	I16  Type = 25
	I32  Type = 26
	I64  Type = 27
	F64  Type = 28
	BF16 Type = 30
)

// QK_K is the super-block size of the K-quants.
const QK_K = 256

type typeInfo struct {
	name      string
	blockSize int // elements per block
	typeSize  int // bytes per block
}

var types = map[Type]typeInfo{
	F32:  {"F32", 1, 4},
	F16:  {"F16", 1, 2},
	Q4_0: {"Q4_0", 32, 2 + 16},
	Q4_1: {"Q4_1", 32, 2 + 2 + 16},
	Q5_0: {"Q5_0", 32, 2 + 4 + 16},
	Q5_1: {"Q5_1", 32, 2 + 2 + 4 + 16},
	Q8_0: {"Q8_0", 32, 2 + 32},
	Q8_1: {"Q8_1", 32, 4 + 4 + 32},
	Q2_K: {"Q2_K", QK_K, QK_K/16 + QK_K/4 + 2 + 2},
	Q3_K: {"Q3_K", QK_K, QK_K/8 + QK_K/4 + 12 + 2},
	Q4_K: {"Q4_K", QK_K, 2 + 2 + 12 + QK_K/2},
	Q5_K: {"Q5_K", QK_K, 2 + 2 + 12 + QK_K/8 + QK_K/2},
	Q6_K: {"Q6_K", QK_K, QK_K/2 + QK_K/4 + QK_K/16 + 2},
	Q8_K: {"Q8_K", QK_K, 4 + QK_K + QK_K/16*2},
	I8:   {"I8", 1, 1},
	I16:  {"I16", 1, 2},
	I32:  {"I32", 1, 4},
	I64:  {"I64", 1, 8},
	F64:  {"F64", 1, 8},
	BF16: {"BF16", 1, 2},
}

// Known reports whether t is a ggml type this package knows the layout of.
func (t Type) Known() bool { _, ok := types[t]; return ok }

// String returns the ggml name of the type, e.g. "Q4_K".
func (t Type) String() string {
	if ti, ok := types[t]; ok {
		return ti.name
	}
	return fmt.Sprintf("type(%d)", uint32(t))
}

// BlockSize returns the number of elements per block (1 for plain types),
// or 0 for an unknown type.
func (t Type) BlockSize() int { return types[t].blockSize }

// TypeSize returns the number of bytes per block, or 0 for an unknown type.
func (t Type) TypeSize() int { return types[t].typeSize }

// RowSize returns the number of bytes of a row of n elements. It returns an
// error when the type is unknown or n is not a multiple of the block size.
func (t Type) RowSize(n int) (int, error) {
	ti, ok := types[t]
	if !ok {
		return 0, fmt.Errorf("ggml: unknown type %s", t)
	}
	if n < 0 || n%ti.blockSize != 0 {
		return 0, fmt.Errorf("ggml: row of %d elements is not a multiple of the %s block size %d", n, ti.name, ti.blockSize)
	}
	if n/ti.blockSize > math.MaxInt/ti.typeSize {
		return 0, fmt.Errorf("ggml: row of %d %s elements overflows", n, ti.name)
	}
	return n / ti.blockSize * ti.typeSize, nil
}

// ParseType returns the type named s (case-insensitive, e.g. "q4_k").
func ParseType(s string) (Type, error) {
	for t, ti := range types {
		if equalFold(ti.name, s) {
			return t, nil
		}
	}
	return 0, fmt.Errorf("ggml: unknown type %q", s)
}

func equalFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'a' <= x && x <= 'z' {
			x -= 'a' - 'A'
		}
		if 'a' <= y && y <= 'z' {
			y -= 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}
