//go:build goexperiment.simd && amd64

package tensor

import (
	"encoding/binary"
	"math"
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
