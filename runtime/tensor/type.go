// Package tensor holds the ggml tensor types used by GGUF files, their block
// layouts, and the kernels the runtime computes with: dequantization,
// activation quantization, dot products and parallel matrix-vector products.
package tensor

import "github.com/lesfarm/lesfarm/runtime/ggml"

// Type is a ggml tensor type id, as stored in GGUF tensor infos; an alias of
// ggml.Type, which defines the types and their block layouts.
type Type = ggml.Type

// ggml type ids (ggml.h), re-exported so kernel code reads tensor.Q4_K.
const (
	F32  = ggml.F32
	F16  = ggml.F16
	Q4_0 = ggml.Q4_0
	Q4_1 = ggml.Q4_1
	Q5_0 = ggml.Q5_0
	Q5_1 = ggml.Q5_1
	Q8_0 = ggml.Q8_0
	Q8_1 = ggml.Q8_1
	Q2_K = ggml.Q2_K
	Q3_K = ggml.Q3_K
	Q4_K = ggml.Q4_K
	Q5_K = ggml.Q5_K
	Q6_K = ggml.Q6_K
	Q8_K = ggml.Q8_K
	I8   = ggml.I8
	I16  = ggml.I16
	I32  = ggml.I32
	I64  = ggml.I64
	F64  = ggml.F64
	BF16 = ggml.BF16
)

// QK_K is the super-block size of the K-quants.
const QK_K = ggml.QK_K

// ParseType returns the type named s (case-insensitive, e.g. "q4_k").
func ParseType(s string) (Type, error) { return ggml.ParseType(s) }
