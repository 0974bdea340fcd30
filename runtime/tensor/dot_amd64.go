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

// q8_0SumsAVX2 sets out[i] to the integer dot product of Q8_0 weight block
// i (34-byte blocks at w) with activation block y[i], for nb blocks.
//
//go:noescape
func q8_0SumsAVX2(w *byte, y *blockQ8_0, nb int, out *int32)

// q6kBlockAVX2 is q4kBlockAVX2 for a whole 210-byte Q6_K block with its 16
// scales unpacked to int32.
//
//go:noescape
func q6kBlockAVX2(b *[210]byte, pq *[256]int8, sc *[16]int32, d float32, sums *[8]float32)

// q5_0SumsAVX2 is q8_0SumsAVX2 for Q5_0 weight blocks (22 bytes).
//
//go:noescape
func q5_0SumsAVX2(w *byte, y *blockQ8_0, nb int, out *int32)

// q5kBlockAVX2 is q4kBlockAVX2 for a whole 176-byte Q5_K block.
//
//go:noescape
func q5kBlockAVX2(b *[176]byte, pq *[256]int8, sc *[8]int32, d float32, sums *[8]float32)

// q4_0SumsAVX2 is q8_0SumsAVX2 for Q4_0 weight blocks (18 bytes).
//
//go:noescape
func q4_0SumsAVX2(w *byte, y *blockQ8_0, nb int, out *int32)

// q4kRowAVX2 is the whole Q4_K × Q8_K row dot product (nb blocks) in
// assembly, identical to dotQ4KQ8KGeneric.
//
//go:noescape
func q4kRowAVX2(w *byte, y *blockQ8K, nb int) float32

func asmKernels() map[Type]*kernel {
	if !cpu.X86.HasAVX2 || !cpu.X86.HasF16C {
		return nil
	}
	m := map[Type]*kernel{
		F32:  {act: actF32, impl: "avx2-asm", exact: true, f32: dotF32Asm},
		F16:  {act: actF16, impl: "avx2-asm", exact: true, f32: dotF16Asm},
		BF16: {act: actBF16, impl: "avx2-asm", exact: true, f32: dotBF16Asm},
	}
	// These replace the archsimd ones in GOEXPERIMENT=simd builds too: they
	// are as fast (Q4_K) or faster (Q6_K 2.2×, Q8_0) and work in every build.
	permuteQ8K = true
	m[Q4_K] = &kernel{act: actQ8K, impl: "avx2-asm", exact: true, q8k: dotQ4KQ8KRowAsm}
	m[Q6_K] = &kernel{act: actQ8K, impl: "avx2-asm", exact: true, q8k: dotQ6KQ8KAsm}
	m[Q8_0] = &kernel{act: actQ8_0, impl: "avx2-asm", exact: true, q80: dotQ8_0Q8_0Asm}
	m[Q5_0] = &kernel{act: actQ8_0, impl: "avx2-asm", exact: true, q80: dotQ5_0Q8_0Asm}
	m[Q4_0] = &kernel{act: actQ8_0, impl: "avx2-asm", exact: true, q80: dotQ4_0Q8_0Asm}
	m[Q5_K] = &kernel{act: actQ8K, impl: "avx2-asm", exact: true, q8k: dotQ5KQ8KAsm}
	return m
}

// kScalesMins unpacks a Q4_K/Q5_K block's scales into sc (ggml's kmask
// shuffle) and returns Σ mins·(sums of 32 activations) for the block.
func kScalesMins(s *[12]byte, bs *[16]int16, sc *[8]int32) int32 {
	u0 := binary.LittleEndian.Uint32(s[0:])
	u1 := binary.LittleEndian.Uint32(s[4:])
	u2 := binary.LittleEndian.Uint32(s[8:])
	s0 := u0 & 0x3f3f3f3f
	s1 := (u2 & 0x0f0f0f0f) | ((u0>>6)&0x03030303)<<4
	m0 := u1 & 0x3f3f3f3f
	m1 := ((u2 >> 4) & 0x0f0f0f0f) | ((u1>>6)&0x03030303)<<4
	sc[0], sc[1], sc[2], sc[3] = int32(s0&0xff), int32(s0>>8&0xff), int32(s0>>16&0xff), int32(s0>>24)
	sc[4], sc[5], sc[6], sc[7] = int32(s1&0xff), int32(s1>>8&0xff), int32(s1>>16&0xff), int32(s1>>24)
	return int32(bs[0])*int32(m0&0xff) + int32(bs[1])*int32(m0>>8&0xff) +
		int32(bs[2])*int32(m0>>16&0xff) + int32(bs[3])*int32(m0>>24) +
		int32(bs[4])*int32(m1&0xff) + int32(bs[5])*int32(m1>>8&0xff) +
		int32(bs[6])*int32(m1>>16&0xff) + int32(bs[7])*int32(m1>>24)
}

func dotQ4KQ8KAsm(w []byte, y []blockQ8K) float32 {
	w = w[:144*len(y)]
	var sums [8]float32
	var sumf float32
	var sc [8]int32
	for i := range y {
		b := (*[144]byte)(w[i*144:])
		yb := &y[i]
		sumi := kScalesMins((*[12]byte)(b[4:]), &yb.bsum2, &sc)
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

// The float kernels call the assembly directly (not through a func value,
// which would make the lane array escape to the heap) for the whole groups
// of 8, then finish like the generic code: reduce8, then the rest in order.

func dotF32Asm(w []byte, x []float32) float32 {
	n := len(x)
	w = w[:4*n]
	g := n / 8
	var r float32
	if g > 0 {
		var s [8]float32
		f32Lanes8(&w[0], &x[0], g, &s)
		r = reduce8(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7])
	}
	for i := 8 * g; i < n; i++ {
		r += float32(math.Float32frombits(binary.LittleEndian.Uint32(w[4*i:])) * x[i])
	}
	return r
}

func dotF16Asm(w []byte, x []float32) float32 {
	n := len(x)
	w = w[:2*n]
	g := n / 8
	var r float32
	if g > 0 {
		var s [8]float32
		f16Lanes8(&w[0], &x[0], g, &s)
		r = reduce8(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7])
	}
	for i := 8 * g; i < n; i++ {
		r += float32(f16Table[binary.LittleEndian.Uint16(w[2*i:])] * x[i])
	}
	return r
}

func dotBF16Asm(w []byte, x []float32) float32 {
	n := len(x)
	w = w[:2*n]
	g := n / 8
	var r float32
	if g > 0 {
		var s [8]float32
		bf16Lanes8(&w[0], &x[0], g, &s)
		r = reduce8(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7])
	}
	for i := 8 * g; i < n; i++ {
		r += float32(BF16ToF32(binary.LittleEndian.Uint16(w[2*i:])) * x[i])
	}
	return r
}

func dotQ6KQ8KAsm(w []byte, y []blockQ8K) float32 {
	w = w[:210*len(y)]
	var sums [8]float32
	var sc [16]int32
	for i := range y {
		b := (*[210]byte)(w[i*210:])
		for j := range sc {
			sc[j] = int32(int8(b[192+j]))
		}
		d := f16Table[binary.LittleEndian.Uint16(b[208:])] * y[i].d
		q6kBlockAVX2(b, &y[i].pqs, &sc, d, &sums)
	}
	var sumf float32
	for l := 0; l < 8; l++ {
		sumf += sums[l]
	}
	return sumf
}

func dotQ8_0Q8_0Asm(w []byte, y []blockQ8_0) float32 {
	w = w[:34*len(y)]
	var sumi [64]int32
	var sumf float32
	for base := 0; base < len(y); base += len(sumi) {
		nb := min(len(sumi), len(y)-base)
		q8_0SumsAVX2(&w[34*base], &y[base], nb, &sumi[0])
		for k := 0; k < nb; k++ {
			ib := base + k
			dx := f16Table[binary.LittleEndian.Uint16(w[34*ib:])]
			sumf += float32(float32(sumi[k]) * float32(dx*y[ib].d))
		}
	}
	return sumf
}

func dotQ5KQ8KAsm(w []byte, y []blockQ8K) float32 {
	w = w[:176*len(y)]
	var sums [8]float32
	var sumf float32
	var sc [8]int32
	for i := range y {
		b := (*[176]byte)(w[i*176:])
		yb := &y[i]
		sumi := kScalesMins((*[12]byte)(b[4:]), &yb.bsum2, &sc)
		d := f16Table[binary.LittleEndian.Uint16(b[0:])] * yb.d
		q5kBlockAVX2(b, &yb.pqs, &sc, d, &sums)
		dmin := f16Table[binary.LittleEndian.Uint16(b[2:])] * yb.d
		sumf -= float32(dmin * float32(sumi))
	}
	for l := 0; l < 8; l++ {
		sumf += sums[l]
	}
	return sumf
}

func dotQ5_0Q8_0Asm(w []byte, y []blockQ8_0) float32 {
	w = w[:22*len(y)]
	var sumi [64]int32
	var sumf float32
	for base := 0; base < len(y); base += len(sumi) {
		nb := min(len(sumi), len(y)-base)
		q5_0SumsAVX2(&w[22*base], &y[base], nb, &sumi[0])
		for k := 0; k < nb; k++ {
			ib := base + k
			dx := f16Table[binary.LittleEndian.Uint16(w[22*ib:])]
			sumf += float32(float32(dx*y[ib].d) * float32(sumi[k]))
		}
	}
	return sumf
}

func dotQ4_0Q8_0Asm(w []byte, y []blockQ8_0) float32 {
	w = w[:18*len(y)]
	var sumi [64]int32
	var sumf float32
	for base := 0; base < len(y); base += len(sumi) {
		nb := min(len(sumi), len(y)-base)
		q4_0SumsAVX2(&w[18*base], &y[base], nb, &sumi[0])
		for k := 0; k < nb; k++ {
			ib := base + k
			dx := f16Table[binary.LittleEndian.Uint16(w[18*ib:])]
			sumf += float32(float32(float32(sumi[k])*dx) * y[ib].d)
		}
	}
	return sumf
}

func dotQ4KQ8KRowAsm(w []byte, y []blockQ8K) float32 {
	if len(y) == 0 {
		return 0
	}
	w = w[:144*len(y)]
	return q4kRowAVX2(&w[0], &y[0], len(y))
}
