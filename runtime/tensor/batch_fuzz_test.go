package tensor

import (
	"encoding/binary"
	"math"
	"slices"
	"testing"
)

// FuzzBatchedQ4K checks the batched Q4_K product (MatMul over 1-12
// vectors: q4kVecs2..8 per pass of up to 8, q4kVecs1 for one) against the
// generic ggml port per vector, bit for bit (and the swizzled kernels on
// the same rows swizzled, where this machine swizzles), on arbitrary weight bytes and
// activations derived from them (every nibble, scale and min pattern; row
// and block counts around the prefetch distance). Half scales are forced
// finite.
func FuzzBatchedQ4K(f *testing.F) {
	f.Add(uint8(3), uint8(1), uint8(8), []byte{0xff, 0xff, 0xff, 0x80})
	f.Add(uint8(13), uint8(4), uint8(5), []byte{1, 2, 3, 250, 128, 127})
	f.Add(uint8(1), uint8(2), uint8(11), []byte{0x0f, 0xf0, 0x7f})
	f.Fuzz(func(t *testing.T, rows, blocks, vecs uint8, seed []byte) {
		fuzzBatched(t, Q4_K, rows, blocks, vecs, seed)
	})
}

// FuzzBatchedK23 is FuzzBatchedQ4K for the batched Q2_K and Q3_K kernels
// (which even: Q2_K, odd: Q3_K): every scale, min and high-bit pattern,
// 1-17 rows, 1-5 super-blocks, 1-12 vectors (passes of up to 8).
func FuzzBatchedK23(f *testing.F) {
	f.Add(uint8(0), uint8(3), uint8(1), uint8(8), []byte{0xff, 0xff, 0xff, 0x80})
	f.Add(uint8(1), uint8(13), uint8(4), uint8(5), []byte{1, 2, 3, 250, 128, 127})
	f.Add(uint8(0), uint8(1), uint8(2), uint8(11), []byte{0x0f, 0xf0, 0x7f})
	f.Add(uint8(1), uint8(6), uint8(3), uint8(2), []byte{0x00, 0x55, 0xaa, 0x81})
	f.Fuzz(func(t *testing.T, which, rows, blocks, vecs uint8, seed []byte) {
		fuzzBatched(t, [...]Type{Q2_K, Q3_K}[which%2], rows, blocks, vecs, seed)
	})
}

// fuzzBatched runs one case of the batched fuzz tests: a typ matrix of
// 1+rows%17 rows and 1+blocks%5 super-blocks filled from seed (half scales
// made finite) times 1+vecs%12 vectors, against the generic kernel.
func fuzzBatched(t *testing.T, typ Type, rows, blocks, vecs uint8, seed []byte) {
	nrows := 1 + int(rows)%17
	nb := 1 + int(blocks)%5
	nv := 1 + int(vecs)%12
	if len(seed) == 0 {
		seed = []byte{0}
	}
	cols := nb * QK_K
	bs := typ.TypeSize()
	halves := map[Type][]int{Q4_K: {0, 2}, Q2_K: {80, 82}, Q3_K: {108}}[typ]
	data := make([]byte, nrows*nb*bs)
	for i := range data {
		data[i] = seed[i%len(seed)] ^ byte(i*131>>3)
	}
	for off := 0; off < len(data); off += bs {
		for _, o := range halves {
			if h := binary.LittleEndian.Uint16(data[off+o:]); h&0x7c00 == 0x7c00 {
				binary.LittleEndian.PutUint16(data[off+o:], h&^0x0400)
			}
		}
	}
	m := Matrix{Type: typ, Rows: nrows, Cols: cols, Data: data}
	x := make([]float32, nv*cols)
	for i := range x {
		b := seed[(i*7+i/cols)%len(seed)]
		x[i] = float32(int8(b^byte(i>>2))) / 16
	}
	// the matrix as loaded: in the file's layout, and swizzled where
	// this machine swizzles typ
	ms := []Matrix{m}
	if Swizzles(typ) {
		sw := Matrix{Type: typ, Rows: nrows, Cols: cols, Data: slices.Clone(data), Swizzled: true}
		if _, err := Swizzle(typ, sw.Data); err != nil {
			t.Fatal(err)
		}
		ms = append(ms, sw)
	}
	for _, mm := range ms {
		got := make([]float32, nv*nrows)
		if err := MatMul(nil, got, mm, x, nv); err != nil {
			t.Fatal(err)
		}
		for v := range nv {
			want := genericMatVec(t, m, x[v*cols:(v+1)*cols])
			for r, w := range want {
				g := got[v*nrows+r]
				if math.Float32bits(g) != math.Float32bits(w) && !(g != g && w != w) {
					t.Fatalf("%v %d×%d (swizzled %t), %d vectors: vector %d row %d: %v (%#x), generic %v (%#x)", typ, nrows, cols, mm.Swizzled, nv, v, r,
						g, math.Float32bits(g), w, math.Float32bits(w))
				}
			}
		}
	}
}
