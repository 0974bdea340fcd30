package tensor

import (
	"math"
	"testing"
)

// TestQuantizeQ8KRoundsProduct checks that the Go activation quantizer
// rounds iscale·x to float32 before nearestInt adds its magic constant, as
// ggml's quantize_row_q8_K does. Go fuses a multiply and an add into one
// FMA (on arm64, and on amd64 from GOAMD64=v3) unless a conversion rounds
// the product, and the fused form gives another quant where iscale·x lies
// within an ulp of a half: an arm64 phone and an amd64 host would then
// not decode the same tokens from the same file. The block holds values
// found here for which the fused result (emulated: the exact product plus
// the constant, rounded once) and the rounded one differ.
func TestQuantizeQ8KRoundsProduct(t *testing.T) {
	const mx = float32(-100.3) // the block's value of largest magnitude
	iscale := -127 / mx
	fusedInt := func(v float32) int32 {
		val := float32(float64(iscale)*float64(v) + 12582912.0)
		return (int32(math.Float32bits(val)) & 0x007fffff) - 0x00400000
	}
	var x [QK_K]float32
	x[0] = mx
	n := 1
	for k := -126; k < 126 && n < QK_K; k++ {
		v := (float32(k) + 0.5) / iscale
		for range 4 {
			if n < QK_K && abs32(v) < -mx && nearestInt(float32(iscale*v)) != fusedInt(v) {
				x[n] = v
				n++
			}
			v = math.Nextafter32(v, 1000)
		}
	}
	if n < 8 {
		t.Fatalf("found %d values where a fused product rounds differently; the search needs mending", n-1)
	}
	var b [1]blockQ8K
	quantizeQ8KGo(x[:], b[:])
	for i := range n {
		want := int8(min(127, nearestInt(float32(iscale*x[i]))))
		if b[0].qs[i] != want {
			t.Fatalf("x[%d] = %v: quant %d, want %d (iscale·x rounded to float32 first, as ggml)", i, x[i], b[0].qs[i], want)
		}
	}
	t.Logf("%d values on which a fused product would change the quant", n-1)
}
