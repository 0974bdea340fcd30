package tensor

import (
	"encoding/binary"
	"math"
	"testing"
)

// FuzzBatchedQ4K checks the batched Q4_K product (MatMul over 1-12
// vectors: q4kVecs2..8 per pass of up to 8, q4kVecs1 for one) against the
// generic ggml port per vector, bit for bit, on arbitrary weight bytes and
// activations derived from them (every nibble, scale and min pattern; row
// and block counts around the prefetch distance). Half scales are forced
// finite.
func FuzzBatchedQ4K(f *testing.F) {
	f.Add(uint8(3), uint8(1), uint8(8), []byte{0xff, 0xff, 0xff, 0x80})
	f.Add(uint8(13), uint8(4), uint8(5), []byte{1, 2, 3, 250, 128, 127})
	f.Add(uint8(1), uint8(2), uint8(11), []byte{0x0f, 0xf0, 0x7f})
	f.Fuzz(func(t *testing.T, rows, blocks, vecs uint8, seed []byte) {
		nrows := 1 + int(rows)%17
		nb := 1 + int(blocks)%5
		nv := 1 + int(vecs)%12
		if len(seed) == 0 {
			seed = []byte{0}
		}
		cols := nb * QK_K
		data := make([]byte, nrows*nb*144)
		for i := range data {
			data[i] = seed[i%len(seed)] ^ byte(i*131>>3)
		}
		for off := 0; off < len(data); off += 144 {
			for _, o := range []int{off, off + 2} {
				if h := binary.LittleEndian.Uint16(data[o:]); h&0x7c00 == 0x7c00 {
					binary.LittleEndian.PutUint16(data[o:], h&^0x0400)
				}
			}
		}
		m := Matrix{Type: Q4_K, Rows: nrows, Cols: cols, Data: data}
		x := make([]float32, nv*cols)
		for i := range x {
			b := seed[(i*7+i/cols)%len(seed)]
			x[i] = float32(int8(b^byte(i>>2))) / 16
		}
		got := make([]float32, nv*nrows)
		if err := MatMul(nil, got, m, x, nv); err != nil {
			t.Fatal(err)
		}
		for v := range nv {
			want := genericMatVec(t, m, x[v*cols:(v+1)*cols])
			for r, w := range want {
				g := got[v*nrows+r]
				if math.Float32bits(g) != math.Float32bits(w) && !(g != g && w != w) {
					t.Fatalf("%d×%d, %d vectors: vector %d row %d: %v (%#x), generic %v (%#x)", nrows, cols, nv, v, r,
						g, math.Float32bits(g), w, math.Float32bits(w))
				}
			}
		}
	})
}
