package tensor

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
)

// ulpDiff is the distance in float32 steps between a and b (same sign).
func ulpDiff(a, b float32) int64 {
	ia, ib := int64(math.Float32bits(a)), int64(math.Float32bits(b))
	if ia > ib {
		return ia - ib
	}
	return ib - ia
}

// TestExpPolyULP checks expPoly against the correctly rounded exp on every
// 97th float32 of the clamped range [expLo, expHi] (about 22 million
// values; every float32 with LESFARM_FULL=1): at most 1 ulp.
func TestExpPolyULP(t *testing.T) {
	step := uint32(97)
	if testing.Short() {
		step = 997
	}
	if os.Getenv("LESFARM_FULL") != "" {
		step = 1
	}
	var worst int64
	var worstX float32
	check := func(x float32) {
		want := float32(math.Exp(float64(x)))
		if d := ulpDiff(expPoly(x), want); d > worst {
			worst, worstX = d, x
		}
	}
	// positive floats up to expHi, then negative ones down to expLo
	for b := uint32(0); b <= math.Float32bits(expHi); b += step {
		check(math.Float32frombits(b))
	}
	for b := uint32(0x80000000); b <= math.Float32bits(expLo); b += step {
		check(math.Float32frombits(b))
	}
	check(expHi)
	check(expLo)
	t.Logf("expPoly: worst %d ulp at %v", worst, worstX)
	if worst > 1 {
		t.Fatalf("expPoly(%v) is %d ulp from exp", worstX, worst)
	}
}

func TestExpPolyEdges(t *testing.T) {
	for _, tc := range []struct{ x, want float32 }{
		{0, 1},
		{float32(math.Copysign(0, -1)), 1},
		{float32(math.Inf(1)), expPoly(expHi)},
		{float32(math.Inf(-1)), expPoly(expLo)},
		{200, expPoly(expHi)},
		{-200, expPoly(expLo)},
	} {
		if got := expPoly(tc.x); got != tc.want {
			t.Errorf("expPoly(%v) = %v, want %v", tc.x, got, tc.want)
		}
	}
	if v := expPoly(float32(math.NaN())); !math.IsNaN(float64(v)) {
		t.Errorf("expPoly(NaN) = %v", v)
	}
	if v := expPoly(expHi); math.IsInf(float64(v), 0) || v < 1e38 {
		t.Errorf("expPoly(%v) = %v", expHi, v)
	}
	if v := expPoly(expLo); v < 1.1e-38 || v > 1.3e-38 {
		t.Errorf("expPoly(%v) = %v", expLo, v)
	}
}

// siluSpecials are inputs at the edges of the kernels' range handling.
var siluSpecials = []float32{0, float32(math.Copysign(0, -1)), 1, -1, 1e-45, -1e-45, 1e-38, -1e-38,
	87.33654, -87.33654, 87.4, -87.4, 88, -88, 88.5, -88.5, 100, -100, 3e38, -3e38,
	float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 0.3465736, -0.3465736, 0.5, -0.5}

func sameBits(a, b float32) bool {
	if math.IsNaN(float64(a)) || math.IsNaN(float64(b)) {
		return math.IsNaN(float64(a)) && math.IsNaN(float64(b))
	}
	return math.Float32bits(a) == math.Float32bits(b)
}

func checkSiLUMul(t *testing.T, g, u []float32) {
	t.Helper()
	want := append([]float32(nil), g...)
	siluMulGo(want, u)
	got := append([]float32(nil), g...)
	SiLUMul(got, u)
	for i := range got {
		if !sameBits(got[i], want[i]) {
			t.Fatalf("%s: SiLUMul(%v)·%v at %d of %d = %v (%#08x), Go %v (%#08x)", siluImpl(), g[i], u[i], i, len(g),
				got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
		}
	}
}

// TestSiLUMulMatchesGo: the build's vector SiLUMul gives the pure-Go bits
// for random and special values, every length around the vector widths.
func TestSiLUMulMatchesGo(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for n := range 70 {
		for _, scale := range []float64{1, 8, 60, 1000} {
			g, u := make([]float32, n), make([]float32, n)
			for i := range g {
				g[i] = float32(r.NormFloat64() * scale)
				u[i] = float32(r.NormFloat64())
			}
			checkSiLUMul(t, g, u)
		}
	}
	g := append([]float32(nil), siluSpecials...)
	u := make([]float32, len(g))
	for i := range u {
		u[i] = 1
	}
	checkSiLUMul(t, g, u)
	// every 4099th float32 bit pattern, 8 at a time
	g, u = make([]float32, 0, 1<<20), make([]float32, 0, 1<<20)
	for b := uint64(0); b < 1<<32; b += 4099 {
		g = append(g, math.Float32frombits(uint32(b)))
		u = append(u, 1)
	}
	checkSiLUMul(t, g, u)
}

// TestSiLUMulAccuracy: silu with expPoly is close to silu with math.Exp.
func TestSiLUMulAccuracy(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	var worst float64
	for range 200000 {
		x := float32(r.NormFloat64() * 10)
		got := float64(siluPoly(x))
		want := float64(x) / (1 + math.Exp(-float64(x)))
		if want == 0 {
			continue
		}
		if e := math.Abs(got-want) / math.Abs(want); e > worst {
			worst = e
		}
	}
	t.Logf("silu relative error: worst %.3g", worst)
	if worst > 4e-7 {
		t.Fatalf("silu relative error %.3g", worst)
	}
}

func FuzzSiLUMul(f *testing.F) {
	seed := make([]byte, 4*len(siluSpecials))
	for i, v := range siluSpecials {
		binary.LittleEndian.PutUint32(seed[4*i:], math.Float32bits(v))
	}
	f.Add(seed)
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33})
	f.Fuzz(func(t *testing.T, b []byte) {
		n := len(b) / 8
		g, u := make([]float32, n), make([]float32, n)
		for i := range n {
			g[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[8*i:]))
			u[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[8*i+4:]))
		}
		checkSiLUMul(t, g, u)
	})
}

// BenchmarkSiLUMul: the build's SiLUMul against the math.Exp SwiGLU it
// replaces in the model, 4,096 values (an expert's gate for 8 positions).
//
//	go test ./runtime/tensor -run XXX -bench SiLUMul
func BenchmarkSiLUMul(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	g0, u := randVec(r, 4096, 3), randVec(r, 4096, 1)
	g := make([]float32, len(g0))
	for _, tc := range []struct {
		name string
		fn   func(g, u []float32)
	}{{siluImpl(), SiLUMul}, {"go", siluMulGo}, {"math.Exp", func(g, u []float32) { SwiGLU(g, g, u) }}} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				copy(g, g0)
				tc.fn(g, u)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(g)), "ns/value")
		})
	}
}

// TestExpShiftMatchesGo: the build's vector ExpShift gives the pure-Go
// bits (expPoly(x-m)) for random rows, special values and every 4099th bit
// pattern, with several shifts and every length around the vector width.
func TestExpShiftMatchesGo(t *testing.T) {
	check := func(x []float32, m float32) {
		t.Helper()
		want := append([]float32(nil), x...)
		expShiftGo(want, m)
		got := append([]float32(nil), x...)
		ExpShift(got, m)
		for i := range got {
			if !sameBits(got[i], want[i]) {
				t.Fatalf("%s: ExpShift(%v, m=%v) at %d of %d = %v (%#08x), Go %v (%#08x)", siluImpl(), x[i], m, i, len(x),
					got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
			}
		}
	}
	r := rand.New(rand.NewPCG(11, 12))
	for n := range 40 {
		for _, scale := range []float64{1, 10, 100} {
			x := make([]float32, n)
			for i := range x {
				x[i] = float32(r.NormFloat64() * scale)
			}
			check(x, 0)
			if n > 0 {
				check(x, slices.Max(x))
			}
		}
	}
	for _, m := range []float32{0, 1, -3, 88, float32(math.Inf(1))} {
		check(append([]float32(nil), siluSpecials...), m)
	}
	x := make([]float32, 0, 1<<20)
	for b := uint64(0); b < 1<<32; b += 4099 {
		x = append(x, math.Float32frombits(uint32(b)))
	}
	check(x, 0)
}
