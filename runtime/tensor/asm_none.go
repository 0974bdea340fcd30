//go:build !amd64 || purego

package tensor

// asmKernels: only amd64 has assembly float kernels (arm64's live with its
// NEON kernels in dot_arm64.go).
func asmKernels() map[Type]*kernel { return nil }

// rowKernels returns the kernel set without batched forms (benchmarks
// compare the two).
func rowKernels() map[Type]*kernel {
	m := make(map[Type]*kernel, len(kernels))
	for t, k := range kernels {
		c := *k
		c.q8kN, c.q80N, c.f32N, c.single = nil, nil, nil, false
		m[t] = &c
	}
	return m
}

// prevKernels: no previous batched kernels outside amd64 assembly.
func prevKernels() map[Type]*kernel { return nil }

// prevVecsKernels: the previous 2-8 vector Q4_K kernels exist only in
// amd64 assembly.
func prevVecsKernels() map[Type]*kernel { return nil }

// prevDecodeKernels: the previous decode kernels exist only in amd64
// assembly.
func prevDecodeKernels() map[Type]*kernel { return nil }

// prevK23Kernels: the previous batched Q2_K and Q3_K forms exist only in
// amd64 assembly.
func prevK23Kernels() map[Type]*kernel { return nil }

// q4kPairs: the two-row single-vector Q4_K kernel exists only in amd64
// assembly; benchmarks that switch it run the same kernels either way.
var q4kPairs = false
