//go:build goexperiment.simd && amd64

package tensor

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestF16x8AllValues checks the SIMD half→float conversion against the
// table for all 65536 halves (NaNs compared as NaN).
func TestF16x8AllValues(t *testing.T) {
	b := make([]byte, 16)
	var out [8]float32
	c := newF16Consts()
	for h := 0; h < 1<<16; h += 8 {
		for k := 0; k < 8; k++ {
			binary.LittleEndian.PutUint16(b[2*k:], uint16(h+k))
		}
		c.f16x8(b).Store(&out)
		for k := 0; k < 8; k++ {
			want := F16ToF32(uint16(h + k))
			if math.Float32bits(out[k]) != math.Float32bits(want) && !(want != want && out[k] != out[k]) {
				t.Fatalf("half %#04x: simd %v (%#08x), table %v", h+k, out[k], math.Float32bits(out[k]), want)
			}
		}
	}
}

// TestArchsimdKernels checks every archsimd kernel against the generic one
// (the assembly kernels replace most of them in MatVec, so they are tested
// here directly): exact, or within 1e-6·Σ|w·x| for reordered float sums.
func TestArchsimdKernels(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 24))
	simd := simdKernels()
	types := make([]Type, 0, len(simd))
	for typ := range simd {
		types = append(types, typ)
	}
	slices.Sort(types) // the random stream must not depend on map order
	for _, typ := range types {
		k := simd[typ]
		ks := map[Type]*kernel{typ: k}
		for _, cols := range []int{256, 1280} {
			if cols%typ.BlockSize() != 0 {
				continue
			}
			m := makeMatrix(t, r, typ, 8, cols)
			x := randVec(r, cols, 2)
			want := genericMatVec(t, m, x)
			got := make([]float32, 8)
			if err := matMulWith(ks, nil, got, m, x, 1); err != nil {
				t.Fatal(err)
			}
			for i := range got {
				if k.exact {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("%s archsimd cols %d row %d: %v != generic %v", typ, cols, i, got[i], want[i])
					}
				} else if d, nrm := math.Abs(float64(got[i]-want[i])), absDot(m, i, x); d > 1e-6*nrm {
					t.Fatalf("%s archsimd cols %d row %d: %v vs generic %v (|diff| %.3g > 1e-6·Σ|w·x| = %.3g)", typ, cols, i, got[i], want[i], d, 1e-6*nrm)
				}
			}
		}
	}
	if len(simd) == 0 {
		t.Skip("no AVX2 on this CPU")
	}
}
