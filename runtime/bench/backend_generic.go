//go:build !(goexperiment.simd && amd64) && !(arm64 && !purego)

package bench

// backend names the kernel build in reports: pure Go kernels.
const backend = "go"
