//go:build amd64 && !purego

package tensor

import (
	"encoding/binary"
	"math"

	"golang.org/x/sys/cpu"
)

// Go assembly (dot_amd64.s) for the float weight types, so that default
// builds (no GOEXPERIMENT) also get vector F32/F16/BF16 products: AVX2 +
// F16C (VCVTPH2PS). They keep the generic 8-lane order with separate
// multiply and add, so they are exact.

//go:noescape
func f32Lanes8(w *byte, x *float32, groups int, out *[8]float32)

//go:noescape
func f16Lanes8(w *byte, x *float32, groups int, out *[8]float32)

//go:noescape
func bf16Lanes8(w *byte, x *float32, groups int, out *[8]float32)

// q4kBlockAVX2 computes the 8 int32 lane sums of one Q4_K super-block from
// its 128 nibble bytes, the interleaved activation (blockQ8K.pqs) and the 8
// unpacked sub-block scales, and adds d·lane to sums (the generic update).
//
//go:noescape
func q4kBlockAVX2(q *[128]byte, pq *[256]int8, sc *[8]int32, d float32, sums *[8]float32)

func asmKernels() map[Type]*kernel {
	if !cpu.X86.HasAVX2 || !cpu.X86.HasF16C {
		return nil
	}
	m := map[Type]*kernel{
		F32:  {act: actF32, impl: "avx2-asm", exact: true, f32: dotF32Asm},
		F16:  {act: actF16, impl: "avx2-asm", exact: true, f32: dotF16Asm},
		BF16: {act: actBF16, impl: "avx2-asm", exact: true, f32: dotBF16Asm},
	}
	// The archsimd Q4_K kernel (GOEXPERIMENT=simd) is as fast; add the
	// assembly one for default builds only.
	if k := simdKernels()[Q4_K]; k == nil {
		permuteQ8K = true
		m[Q4_K] = &kernel{act: actQ8K, impl: "avx2-asm", exact: true, q8k: dotQ4KQ8KAsm}
	}
	return m
}

func dotQ4KQ8KAsm(w []byte, y []blockQ8K) float32 {
	w = w[:144*len(y)]
	var sums [8]float32
	var sumf float32
	var sc [8]int32
	for i := range y {
		b := (*[144]byte)(w[i*144:])
		yb := &y[i]
		// ggml's kmask unpacking of the 6-bit scales and mins.
		u0 := binary.LittleEndian.Uint32(b[4:])
		u1 := binary.LittleEndian.Uint32(b[8:])
		u2 := binary.LittleEndian.Uint32(b[12:])
		s0 := u0 & 0x3f3f3f3f
		s1 := (u2 & 0x0f0f0f0f) | ((u0>>6)&0x03030303)<<4
		m0 := u1 & 0x3f3f3f3f
		m1 := ((u2 >> 4) & 0x0f0f0f0f) | ((u1>>6)&0x03030303)<<4
		sc[0], sc[1], sc[2], sc[3] = int32(s0&0xff), int32(s0>>8&0xff), int32(s0>>16&0xff), int32(s0>>24)
		sc[4], sc[5], sc[6], sc[7] = int32(s1&0xff), int32(s1>>8&0xff), int32(s1>>16&0xff), int32(s1>>24)
		bs := &yb.bsum2
		sumi := int32(bs[0])*int32(m0&0xff) + int32(bs[1])*int32(m0>>8&0xff) +
			int32(bs[2])*int32(m0>>16&0xff) + int32(bs[3])*int32(m0>>24) +
			int32(bs[4])*int32(m1&0xff) + int32(bs[5])*int32(m1>>8&0xff) +
			int32(bs[6])*int32(m1>>16&0xff) + int32(bs[7])*int32(m1>>24)
		d := f16Table[binary.LittleEndian.Uint16(b[0:])] * yb.d
		q4kBlockAVX2((*[128]byte)(b[16:]), &yb.pqs, &sc, d, &sums)
		dmin := f16Table[binary.LittleEndian.Uint16(b[2:])] * yb.d
		sumf -= float32(dmin * float32(sumi))
	}
	for l := 0; l < 8; l++ {
		sumf += sums[l]
	}
	return sumf
}

// asmDot runs a lanes kernel over the whole groups of 8 and finishes like
// the generic code: reduce8, then the remainder in order.
func asmDot(lanes func(*byte, *float32, int, *[8]float32), w []byte, x []float32, size int, elem func([]byte) float32) float32 {
	n := len(x)
	w = w[:size*n]
	g := n / 8
	var r float32
	if g > 0 {
		var s [8]float32
		lanes(&w[0], &x[0], g, &s)
		r = reduce8(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7])
	}
	for i := 8 * g; i < n; i++ {
		r += float32(elem(w[size*i:]) * x[i])
	}
	return r
}

func dotF32Asm(w []byte, x []float32) float32 {
	return asmDot(f32Lanes8, w, x, 4, func(b []byte) float32 { return math.Float32frombits(binary.LittleEndian.Uint32(b)) })
}

func dotF16Asm(w []byte, x []float32) float32 {
	return asmDot(f16Lanes8, w, x, 2, func(b []byte) float32 { return f16Table[binary.LittleEndian.Uint16(b)] })
}

func dotBF16Asm(w []byte, x []float32) float32 {
	return asmDot(bf16Lanes8, w, x, 2, func(b []byte) float32 { return BF16ToF32(binary.LittleEndian.Uint16(b)) })
}
