package tensor

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestQuantizeRoundTripAll quantizes Gaussian rows (plus an outlier, a
// constant and an all-zero block) with every quantizer and checks the
// dequantized values against per-type relative RMS error bounds, and that
// the kernel's dot product equals the dot product of the dequantized row
// with the quantized activation within float error.
func TestQuantizeRoundTripAll(t *testing.T) {
	// Relative RMS error bounds on N(0,1) data (measured values are about
	// 60-80% of these; they order the types by bits per weight).
	bounds := map[Type]float64{
		Q8_0: 0.008, Q6_K: 0.025, Q5_K: 0.045, Q5_0: 0.06, Q4_K: 0.09, Q4_0: 0.12, Q3_K: 0.2, Q2_K: 0.4,
	}
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 8 * QK_K
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	x[100] = 9                   // an outlier
	for i := 512; i < 768; i++ { // a constant block
		x[i] = 0.25
	}
	for i := 768; i < 1024; i++ { // an all-zero block
		x[i] = 0
	}
	for typ, bound := range bounds {
		t.Run(typ.String(), func(t *testing.T) {
			rb, err := typ.RowSize(n)
			if err != nil {
				t.Fatal(err)
			}
			q := make([]byte, rb)
			if err := Quantize(typ, x, q); err != nil {
				t.Fatal(err)
			}
			par := make([]byte, rb)
			if err := QuantizeParallel(NewPool(2), typ, x, par); err != nil {
				t.Fatal(err)
			}
			if string(par) != string(q) {
				t.Fatal("QuantizeParallel differs from Quantize")
			}
			y := make([]float32, n)
			if err := Dequantize(typ, q, y); err != nil {
				t.Fatal(err)
			}
			var se, ss float64
			for i := range y {
				d := float64(y[i] - x[i])
				se += d * d
				ss += float64(x[i]) * float64(x[i])
				if math.IsNaN(float64(y[i])) || math.IsInf(float64(y[i]), 0) {
					t.Fatalf("value %d dequantizes to %v", i, y[i])
				}
			}
			for i := 768; i < 1024; i++ {
				if y[i] != 0 {
					t.Fatalf("zero block value %d dequantizes to %v", i, y[i])
				}
			}
			rel := math.Sqrt(se / ss)
			if rel > bound {
				t.Fatalf("%s relative RMS error %.4f > %.4f", typ, rel, bound)
			}
			t.Logf("%s: relative RMS error %.4f (%.3f bits/weight)", typ, rel, float64(8*rb)/n)
			// The kernel reads the layout the same way Dequantize does.
			a := make([]float32, n)
			for i := range a {
				a[i] = float32(rng.NormFloat64())
			}
			out := make([]float32, 1)
			if err := MatVec(nil, out, Matrix{Type: typ, Rows: 1, Cols: n, Data: q}, a); err != nil {
				t.Fatal(err)
			}
			var want, mag float64
			for i := range a {
				want += float64(y[i]) * float64(a[i])
				mag += math.Abs(float64(y[i]) * float64(a[i]))
			}
			// The activation is quantized to 8 bits for the integer dot.
			if d := math.Abs(float64(out[0]) - want); d > 0.02*mag {
				t.Fatalf("kernel dot %v, dequantized dot %v (sum |terms| %v)", out[0], want, mag)
			}
		})
	}
}

// TestQuantizeK23Layout checks Q2_K and Q3_K on values that their grids
// represent exactly: the quantizer must find them.
func TestQuantizeK23Layout(t *testing.T) {
	x := make([]float32, QK_K)
	for i := range x {
		x[i] = float32(i%4) * 0.5 // levels 0..3 at scale 0.5, min 0
	}
	q := make([]byte, 84)
	if err := Quantize(Q2_K, x, q); err != nil {
		t.Fatal(err)
	}
	y := make([]float32, QK_K)
	mustDequant(t, Q2_K, q, y)
	for i := range x {
		if math.Abs(float64(y[i]-x[i])) > 1e-3 {
			t.Fatalf("Q2_K value %d: %v, want %v", i, y[i], x[i])
		}
	}
	for i := range x {
		x[i] = float32(i%8-4) * 0.25 // levels -4..3 at scale 0.25
	}
	q = make([]byte, 110)
	if err := Quantize(Q3_K, x, q); err != nil {
		t.Fatal(err)
	}
	mustDequant(t, Q3_K, q, y)
	for i := range x {
		if math.Abs(float64(y[i]-x[i])) > 1e-3 {
			t.Fatalf("Q3_K value %d: %v, want %v", i, y[i], x[i])
		}
	}
}
