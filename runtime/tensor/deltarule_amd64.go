//go:build amd64 && !purego

package tensor

import "golang.org/x/sys/cpu"

// decayAddDotAVX2 is DecayAddDot's AVX2 form for rows of 8·groups floats
// (deltarule_amd64.s). With kn nil it computes only o.
//
//go:noescape
func decayAddDotAVX2(st *float32, groups, rows int, d float32, a, x, q, o, k2, kn *float32)

var hasDecayAddDotAVX2 = cpu.X86.HasAVX2

// decayAddDotAsm runs decayAddDotAVX2 where the CPU has AVX2 (the rows are
// a multiple of 8 long); false tells the caller to use decayAddDotGo.
func decayAddDotAsm(st []float32, d float32, a, x, q, o, k2, kn []float32) bool {
	if !hasDecayAddDotAVX2 {
		return false
	}
	var pk2, pkn *float32
	if kn != nil {
		pk2, pkn = &k2[0], &kn[0]
	}
	decayAddDotAVX2(&st[0], len(x)/8, len(o), d, &a[0], &x[0], &q[0], &o[0], pk2, pkn)
	return true
}
