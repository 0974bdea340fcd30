//go:build arm64 && !purego

package tensor

// siluMulNEON does SiLUMul on n values (a multiple of 4) at g and u.
//
//go:noescape
func siluMulNEON(gp, up *float32, n int)

// siluMulVec runs the NEON kernel on the whole groups of 4 and returns how
// many values it did.
func siluMulVec(g, u []float32) int {
	n := len(g) &^ 3
	if n == 0 {
		return 0
	}
	siluMulNEON(&g[0], &u[0], n)
	return n
}

func siluImpl() string { return "neon" }

// expShiftVec has no vector form in this build: ExpShift does all of x in
// Go (expPoly, the same bits).
func expShiftVec(x []float32, m float32) int { return 0 }
