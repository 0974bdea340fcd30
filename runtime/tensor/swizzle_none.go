//go:build !amd64 || purego

package tensor

// swizzleKernels returns nil: only the amd64 kernels have a swizzled layout.
func swizzleKernels() map[Type]*kernel { return nil }
