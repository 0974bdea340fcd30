package tensor

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
)

// TestDecayAddDotMatchesSeparate checks the fused delta-rule pass against
// its parts: the element-wise update, then dotF32Generic of the updated
// rows with q and k2 (the bits of MatVec on an F32 matrix). The state, o
// and kn must be bit-identical, for the kernel DecayAddDot picks and for
// the Go form, with and without kn, rows a multiple of 8 long and not.
func TestDecayAddDotMatchesSeparate(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 35))
	vec := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		return v
	}
	for _, D := range []int{8, 13, 16, 24, 128} {
		for _, rows := range []int{1, 3, 128} {
			for _, withK := range []bool{false, true} {
				st0, a, x, q, k2 := vec(rows*D), vec(rows), vec(D), vec(D), vec(D)
				d := float32(0.5 + rng.Float64()/2)
				// Reference: the update, then the F32 dots.
				want := append([]float32(nil), st0...)
				wantO, wantK := make([]float32, rows), make([]float32, rows)
				for j := range rows {
					row := want[j*D : (j+1)*D]
					for i := range row {
						row[i] = float32(d*row[i]) + float32(a[j]*x[i])
					}
					b := make([]byte, 4*D)
					for i, v := range row {
						binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
					}
					wantO[j], wantK[j] = dotF32Generic(b, q), dotF32Generic(b, k2)
				}
				for _, impl := range []string{"DecayAddDot", "go"} {
					st := append([]float32(nil), st0...)
					o := make([]float32, rows)
					var k2a, kn []float32
					if withK {
						k2a, kn = k2, make([]float32, rows)
					}
					if impl == "go" {
						decayAddDotGo(st, d, a, x, q, o, k2a, kn)
					} else if err := DecayAddDot(st, d, a, x, q, o, k2a, kn); err != nil {
						t.Fatal(err)
					}
					for i := range st {
						if math.Float32bits(st[i]) != math.Float32bits(want[i]) {
							t.Fatalf("%s D=%d rows=%d kn=%v: state[%d] = %g, want %g", impl, D, rows, withK, i, st[i], want[i])
						}
					}
					for j := range rows {
						if math.Float32bits(o[j]) != math.Float32bits(wantO[j]) {
							t.Fatalf("%s D=%d rows=%d kn=%v: o[%d] = %g, want %g", impl, D, rows, withK, j, o[j], wantO[j])
						}
						if withK && math.Float32bits(kn[j]) != math.Float32bits(wantK[j]) {
							t.Fatalf("%s D=%d rows=%d: kn[%d] = %g, want %g", impl, D, rows, j, kn[j], wantK[j])
						}
					}
				}
			}
		}
	}
	if err := DecayAddDot(make([]float32, 10), 1, make([]float32, 2), make([]float32, 4), make([]float32, 4), make([]float32, 2), nil, nil); err == nil {
		t.Error("DecayAddDot accepted a state of 10 floats for 2 rows of 4")
	}
}
