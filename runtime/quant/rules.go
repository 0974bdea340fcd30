// Package quant converts GGUF models from F32/F16/BF16 to quantized types,
// tensor by tensor, the way llama.cpp's llama-quantize does without an
// importance matrix: the same reference quantizers (runtime/tensor), the
// same choice of which tensors stay unquantized and the same fallback for
// rows that are not a multiple of a K-quant's 256-value block. It also holds
// the mixed-precision planner (plan.go, sensitivity.go, knapsack.go), which
// chooses a type per (layer, part) under a byte budget.
package quant

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/lesfarm/lesfarm/runtime/tensor"
)

// Types are the target types Quantize accepts, most bits first.
var Types = []tensor.Type{tensor.Q8_0, tensor.Q6_K, tensor.Q5_K, tensor.Q4_K, tensor.Q3_K, tensor.Q2_K}

// ParseType parses a target type name (case-insensitive, e.g. q4_k).
func ParseType(s string) (tensor.Type, error) {
	t, err := tensor.ParseType(s)
	if err == nil {
		for _, v := range Types {
			if v == t {
				return t, nil
			}
		}
	}
	names := make([]string, len(Types))
	for i, v := range Types {
		names[i] = v.String()
	}
	return 0, fmt.Errorf("quant: type %q is not a target type (use %s)", s, strings.Join(names, ", "))
}

// ErrQuantizedInput is wrapped when a tensor that would be quantized is not
// F32, F16 or BF16.
var ErrQuantizedInput = errors.New("input already quantized")

// ErrRowLength is wrapped when a tensor's rows fit neither the requested
// type's block nor its fallback's.
var ErrRowLength = errors.New("row length not a multiple of the block")

// Quantizable reports whether llama-quantize would quantize the tensor
// name of ndims dimensions: weight matrices (2-D and more) only, except the
// MoE router (ffn_gate_inp, incl. a shared expert's), which llama.cpp keeps
// in its input type because routing is sensitive to it, and a few tensors
// llama.cpp never quantizes (positional embeddings, SSM convolution and
// state parameters). Norm vectors are 1-D and stay as they are.
func Quantizable(name string, ndims int) bool {
	if ndims < 2 || !strings.HasSuffix(name, "weight") {
		return false
	}
	for _, s := range []string{"ffn_gate_inp", "pos_embd", "token_types", "ssm_conv1d", "ssm_a", "ssm_d", "ssm_dt", "attn_rel_b"} {
		if strings.Contains(name, s) {
			return false
		}
	}
	return true
}

// Fallback returns the type llama-quantize uses for a row of cols values
// when want's block does not divide it: Q4_K → Q5_0, Q5_K → Q5_1, Q6_K →
// Q8_0. llama.cpp maps Q2_K and Q3_K to IQ4_NL, which this runtime has no
// kernel for; they fall back to Q4_0, the nearest legacy 4-bit type. A type
// whose block divides cols is returned unchanged.
func Fallback(want tensor.Type, cols int) tensor.Type {
	if cols%want.BlockSize() == 0 {
		return want
	}
	switch want {
	case tensor.Q2_K, tensor.Q3_K:
		return tensor.Q4_0
	case tensor.Q4_K:
		return tensor.Q5_0
	case tensor.Q5_K:
		return tensor.Q5_1
	case tensor.Q6_K:
		return tensor.Q8_0
	}
	return want
}

// Target returns the type a tensor is written with when want is asked for:
// its own type if it is not quantizable or already want, else want or its
// fallback. It returns an error wrapping ErrQuantizedInput for a quantized
// source and ErrRowLength when no fallback fits the rows.
func Target(name string, dims []uint64, src, want tensor.Type) (typ tensor.Type, fellBack bool, err error) {
	return target(name, dims, src, want, false)
}

// target is Target; requant lets a quantized source through: its values
// are dequantized and quantized again (llama-quantize's
// --allow-requantize), which adds both quantizations' error.
func target(name string, dims []uint64, src, want tensor.Type, requant bool) (typ tensor.Type, fellBack bool, err error) {
	if !Quantizable(name, len(dims)) || src == want {
		return src, false, nil
	}
	if !requant && !floatType(src) {
		return 0, false, fmt.Errorf("quant: tensor %s is already %s: %w; quantize from the F32, F16 or BF16 model (or requantize: --allow-requantize)", name, src, ErrQuantizedInput)
	}
	cols := int(dims[0])
	t := Fallback(want, cols)
	if cols%t.BlockSize() != 0 {
		return 0, false, fmt.Errorf("quant: tensor %s has rows of %d values, not a multiple of the %d-value block of %s: %w; choose F16 or a type whose block divides %d", name, cols, t.BlockSize(), t, ErrRowLength, cols)
	}
	return t, t != want, nil
}

// floatType reports whether t is an unquantized float type.
func floatType(t tensor.Type) bool { return t == tensor.F32 || t == tensor.F16 || t == tensor.BF16 }

// FileType returns llama.cpp's general.file_type (enum llama_ftype) for a
// model quantized uniformly to t: the _S variant for K-quants, which is what
// a uniform K-quant model is closest to.
func FileType(t tensor.Type) uint32 {
	switch t {
	case tensor.F32:
		return 0
	case tensor.F16:
		return 1
	case tensor.Q4_0:
		return 2
	case tensor.Q4_1:
		return 3
	case tensor.Q8_0:
		return 7
	case tensor.Q5_0:
		return 8
	case tensor.Q5_1:
		return 9
	case tensor.Q2_K:
		return 10
	case tensor.Q3_K:
		return 11 // Q3_K_S
	case tensor.Q4_K:
		return 14 // Q4_K_S
	case tensor.Q5_K:
		return 16 // Q5_K_S
	case tensor.Q6_K:
		return 18
	case tensor.BF16:
		return 32
	}
	return 1024 // LLAMA_FTYPE_GUESSED
}

// layerOf returns L for a tensor named blk.L.*, or -1.
func layerOf(name string) int {
	rest, ok := strings.CutPrefix(name, "blk.")
	if !ok {
		return -1
	}
	num, _, ok := strings.Cut(rest, ".")
	if !ok {
		return -1
	}
	l, err := strconv.Atoi(num)
	if err != nil || l < 0 {
		return -1
	}
	return l
}
