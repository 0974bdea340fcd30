//go:build !(goexperiment.simd && amd64) && !(arm64 && !purego)

package tensor

// simdKernels returns no SIMD kernels in builds without GOEXPERIMENT=simd
// on amd64.
func simdKernels() map[Type]*kernel { return nil }

// simdName names the SIMD implementation in benchmarks ("" = none).
const simdName = ""

// simdExact lists the SIMD kernels that must equal the generic ones bit for
// bit.
var simdExact = map[Type]bool{}
