package tensor

import "sort"

// Supported reports whether this build of the runtime can compute with
// weights of type t: whether a matrix-vector kernel exists for it (norm
// vectors are F32, F16 or BF16, which all have kernels). It is
// CanMatVec under a name meant for capability checks.
func Supported(t Type) bool { return CanMatVec(t) }

// SupportedTypes returns the types Supported accepts, in ggml id order.
func SupportedTypes() []Type {
	out := make([]Type, 0, len(kernels))
	for t := range kernels {
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}
