//go:build arm64 && !purego

package bench

// backend names the kernel build in reports: NEON assembly kernels.
const backend = "go+neon"
