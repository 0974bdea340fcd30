//go:build (!amd64 && !arm64) || purego

package tensor

// siluMulVec has no vector form in this build: SiLUMul does all of g in Go.
func siluMulVec(g, u []float32) int { return 0 }

// siluImpl names the SiLUMul implementation of this build.
func siluImpl() string { return "go" }

// expShiftVec has no vector form in this build: ExpShift does all of x in
// Go (expPoly, the same bits).
func expShiftVec(x []float32, m float32) int { return 0 }
