//go:build !(goexperiment.simd && amd64) && !(arm64 && !purego)

package tensor

// simdKernels returns no SIMD kernels in builds without GOEXPERIMENT=simd
// on amd64 (arm64 has its NEON kernels in dot_arm64.go).
func simdKernels() map[Type]*kernel { return nil }
