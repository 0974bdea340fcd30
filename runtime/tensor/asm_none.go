//go:build !amd64 || purego

package tensor

// asmKernels: only amd64 has assembly float kernels (arm64's live with its
// NEON kernels in dot_arm64.go).
func asmKernels() map[Type]*kernel { return nil }
func rowKernels() map[Type]*kernel { return nil }
