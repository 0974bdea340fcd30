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

func asmKernels() map[Type]*kernel {
	if !cpu.X86.HasAVX2 || !cpu.X86.HasF16C {
		return nil
	}
	return map[Type]*kernel{
		F32:  {act: actF32, impl: "avx2-asm", exact: true, f32: dotF32Asm},
		F16:  {act: actF16, impl: "avx2-asm", exact: true, f32: dotF16Asm},
		BF16: {act: actBF16, impl: "avx2-asm", exact: true, f32: dotBF16Asm},
	}
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
