package tensor

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestRoundF16MatchesScalar: the activation rounding F16 products use
// (F16C on amd64) equals F16ToF32(F32ToF16(x)) bit for bit on every half,
// every midpoint between neighbouring halves (the ties), their neighbours,
// overflow, subnormals and random values; NaN stays NaN.
func TestRoundF16MatchesScalar(t *testing.T) {
	var xs []float32
	for h := range 1 << 16 {
		f := F16ToF32(uint16(h))
		xs = append(xs, f)
		if next := F16ToF32(uint16(h + 1)); h&0x7fff < 0x7c00 && !math.IsInf(float64(f), 0) {
			mid := float32((float64(f) + float64(next)) / 2)
			b := math.Float32bits(mid)
			xs = append(xs, mid, math.Float32frombits(b+1), math.Float32frombits(b-1))
		}
	}
	r := rand.New(rand.NewPCG(5, 6))
	for range 100000 {
		xs = append(xs, math.Float32frombits(r.Uint32()))
	}
	xs = append(xs, 65519, 65520, 65536, 1e10, -1e10, float32(math.Inf(1)), float32(math.NaN()), 0, float32(math.Copysign(0, -1)))
	// NaN makes the whole vector take the scalar path: check the values
	// without NaN on their own (the fast path), then all of them.
	var clean []float32
	for _, x := range xs {
		if !math.IsNaN(float64(x)) {
			clean = append(clean, x)
		}
	}
	for len(clean)%8 != 3 {
		clean = append(clean, 1) // a tail after the groups of 8
	}
	checkRoundF16(t, clean)
	checkRoundF16(t, xs)
}

func checkRoundF16(t *testing.T, xs []float32) {
	t.Helper()
	got := make([]float32, len(xs))
	roundF16(got, xs)
	for i, x := range xs {
		want := f16Table[F32ToF16(x)]
		if math.IsNaN(float64(want)) {
			if !math.IsNaN(float64(got[i])) {
				t.Fatalf("x=%v (%#x): got %v, want NaN", x, math.Float32bits(x), got[i])
			}
			continue
		}
		if math.Float32bits(got[i]) != math.Float32bits(want) {
			t.Fatalf("x=%v (%#x): got %v (%#x), want %v (%#x)", x, math.Float32bits(x), got[i], math.Float32bits(got[i]), want, math.Float32bits(want))
		}
	}
}
