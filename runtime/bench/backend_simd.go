//go:build goexperiment.simd && amd64

package bench

// backend names the kernel build in reports: archsimd (GOEXPERIMENT=simd).
const backend = "go+simd"
