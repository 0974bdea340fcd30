//go:build amd64 && !purego

package tensor

import "golang.org/x/sys/cpu"

// siluMulAVX2 does SiLUMul on n values (a multiple of 8) at g and u.
//
//go:noescape
func siluMulAVX2(gp, up *float32, n int)

// expShiftAVX2 sets x[i] = expPoly(x[i]-m) for the n values (a multiple
// of 8) at xp.
//
//go:noescape
func expShiftAVX2(xp *float32, m float32, n int)

var hasSiLUAVX2 = cpu.X86.HasAVX2

// expShiftVec runs the AVX2 kernel on the whole groups of 8 and returns
// how many values it did.
func expShiftVec(x []float32, m float32) int {
	n := len(x) &^ 7
	if n == 0 || !hasSiLUAVX2 {
		return 0
	}
	expShiftAVX2(&x[0], m, n)
	return n
}

// siluMulVec runs the AVX2 kernel on the whole groups of 8 and returns how
// many values it did.
func siluMulVec(g, u []float32) int {
	n := len(g) &^ 7
	if n == 0 || !hasSiLUAVX2 {
		return 0
	}
	siluMulAVX2(&g[0], &u[0], n)
	return n
}

func siluImpl() string {
	if hasSiLUAVX2 {
		return "avx2-asm"
	}
	return "go"
}
