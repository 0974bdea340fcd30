package tensor

import "math"

// The SiLU of the model FFNs (SiLUMul) uses its own float32 exp, expPoly:
// Cephes' expf (range reduction by ln 2 in two parts, a degree-5
// polynomial, scaling by 2ⁿ built from the exponent bits), with every
// multiply and add rounded separately — no fused multiply-adds — so the
// AVX2 (silu_amd64.s), NEON (silu_arm64.s) and pure-Go forms compute the
// same IEEE operations in the same order and agree bit for bit. Against
// the correctly rounded exp it is within 1 ulp on the clamped range
// (TestExpPolyULP); silu on a vector of 8 (4 on NEON) costs a few
// nanoseconds where math.Exp cost ~10 ns a value.

// expPoly constants (float32 values of Cephes' expf coefficients).
const (
	expLo    float32 = -87.33654 // exp(lo) is the smallest normal float32
	expHi    float32 = 88        // exp(88) ≈ 1.65e38 < MaxFloat32
	expLog2e float32 = 1.44269504088896341
	expC1    float32 = 0.693359375 // ln 2 = C1 - C2, C1 with 9 significant bits
	expC2    float32 = -2.12194440e-4
	expP0    float32 = 1.9875691500e-4
	expP1    float32 = 1.3981999507e-3
	expP2    float32 = 8.3334519073e-3
	expP3    float32 = 4.1665795894e-2
	expP4    float32 = 1.6666665459e-1
	expP5    float32 = 5.0000001201e-1
)

// expPoly returns exp(x) for x clamped to [expLo, expHi] (NaN stays NaN).
// It is the scalar reference of the vector kernels: change one and the
// others must change with it (TestSiLUMulMatchesGo).
func expPoly(x float32) float32 {
	if expLo > x {
		x = expLo
	}
	if expHi < x {
		x = expHi
	}
	fx := float32(math.Floor(float64(float32(x*expLog2e) + 0.5)))
	r := x - float32(fx*expC1)
	r -= float32(fx * expC2)
	z := float32(r * r)
	p := float32(expP0*r) + expP1
	p = float32(p*r) + expP2
	p = float32(p*r) + expP3
	p = float32(p*r) + expP4
	p = float32(p*r) + expP5
	y := float32(p*z) + r
	y += 1
	n := int32(fx) // in [-126, 127] after the clamp; NaN makes y NaN anyway
	return y * math.Float32frombits(uint32(n+127)<<23)
}

// siluPoly returns x/(1+expPoly(-x)).
func siluPoly(x float32) float32 { return x / (1 + expPoly(-x)) }

// SiLUMul sets g[i] = silu(g[i])·u[i] for i < len(g) (the SwiGLU of an FFN:
// silu of the gate times the up projection), silu(x) = x/(1+exp(-x)) with
// the build's vector form of expPoly: every build gives the same bits.
func SiLUMul(g, u []float32) {
	u = u[:len(g)]
	i := siluMulVec(g, u)
	for ; i < len(g); i++ {
		g[i] = siluPoly(g[i]) * u[i]
	}
}

// siluMulGo is the pure-Go SiLUMul (tests compare the vector kernels with it).
func siluMulGo(g, u []float32) {
	u = u[:len(g)]
	for i, v := range g {
		g[i] = siluPoly(v) * u[i]
	}
}

// ExpShift sets x[i] = exp(x[i]-m) with expPoly (the build's vector form
// where there is one): within 1 ulp of the correctly rounded exp and the
// same bits in every build. A softmax passes its maximum as m.
func ExpShift(x []float32, m float32) {
	i := expShiftVec(x, m)
	for ; i < len(x); i++ {
		x[i] = expPoly(x[i] - m)
	}
}

// expShiftGo is the pure-Go ExpShift (tests compare the vector kernel with it).
func expShiftGo(x []float32, m float32) {
	for i, v := range x {
		x[i] = expPoly(v - m)
	}
}
