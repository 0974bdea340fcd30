package tensor

import (
	"encoding/binary"
	"math"
	"testing"
)

// FuzzDecodeKernels checks the single-vector (decode) kernels MatVec uses
// for Q4_K, Q6_K, Q8_0, Q2_K and Q3_K against the generic ggml port, bit for bit, on
// arbitrary weight bytes (the fuzzer's) and an activation derived from them:
// every quant and scale pattern, row counts that are and are not multiples
// of the kernels' groups, block counts with and without a tail of 8. The
// half scales are forced finite so the expected bits are defined (NaN
// payloads are not part of the contract).
func FuzzDecodeKernels(f *testing.F) {
	f.Add(uint8(0), uint8(3), uint8(2), []byte{1, 2, 3, 250, 128, 127})
	f.Add(uint8(1), uint8(1), uint8(1), []byte{0x80, 0x7f, 0xff, 0})
	f.Add(uint8(2), uint8(5), uint8(9), []byte{0x80, 0x80, 0x80, 0x81})
	f.Add(uint8(3), uint8(4), uint8(3), []byte{0xff, 0x00, 0x55, 0xaa})
	f.Add(uint8(4), uint8(7), uint8(2), []byte{0x0f, 0xf0, 0x3c, 0xc3, 0x7f})
	f.Fuzz(func(t *testing.T, which, rows, blocks uint8, seed []byte) {
		typ := [...]Type{Q4_K, Q6_K, Q8_0, Q2_K, Q3_K}[int(which)%5]
		nrows := 1 + int(rows)%17
		nb := 1 + int(blocks)%11
		if len(seed) == 0 {
			seed = []byte{0}
		}
		cols := nb * typ.BlockSize()
		rb, err := typ.RowSize(cols)
		if err != nil {
			t.Fatal(err)
		}
		data := make([]byte, nrows*rb)
		for i := range data {
			data[i] = seed[i%len(seed)] ^ byte(i*131>>3)
		}
		bs := typ.TypeSize()
		finite := func(off int) {
			h := binary.LittleEndian.Uint16(data[off:])
			if h&0x7c00 == 0x7c00 { // Inf/NaN half: keep sign and mantissa, exponent 30
				binary.LittleEndian.PutUint16(data[off:], h&^0x0400)
			}
		}
		for off := 0; off < len(data); off += bs {
			switch typ {
			case Q4_K:
				finite(off)
				finite(off + 2)
			case Q6_K:
				finite(off + 208)
			case Q8_0:
				finite(off)
			case Q2_K:
				finite(off + 80)
				finite(off + 82)
			case Q3_K:
				finite(off + 108)
			}
		}
		m := Matrix{Type: typ, Rows: nrows, Cols: cols, Data: data}
		x := make([]float32, cols)
		for i := range x {
			b := seed[(i*7)%len(seed)]
			x[i] = float32(int8(b^byte(i))) / 16
		}
		want := genericMatVec(t, m, x)
		got := make([]float32, nrows)
		if err := MatVec(nil, got, m, x); err != nil {
			t.Fatal(err)
		}
		for r := range got {
			if math.Float32bits(got[r]) != math.Float32bits(want[r]) && !(got[r] != got[r] && want[r] != want[r]) {
				t.Fatalf("%v %d×%d row %d: %v (%#x), generic %v (%#x)", typ, nrows, cols, r,
					got[r], math.Float32bits(got[r]), want[r], math.Float32bits(want[r]))
			}
		}
	})
}
