//go:build amd64 && !purego

#include "textflag.h"

// Batched float rows: one F32 or F16 weight row against 4 activation
// vectors. Each weight group of 8 is loaded (and for F16 converted with
// VCVTPH2PS) once, then multiplied (VMULPS) and added (VADDPS) into each
// vector's own 8-lane accumulator — per vector exactly the generic 8-lane
// order, so every result equals dotF32Generic / dotF16Generic.

// func f32Lanes8x4(w *byte, x *float32, xstride, groups int, out *[32]float32)
// out[8v+l] = lane l of vector v (x + v·xstride bytes), v < 4.
TEXT ·f32Lanes8x4(SB), NOSPLIT, $0-40
	MOVQ w+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ xstride+16(FP), R9
	MOVQ groups+24(FP), CX
	MOVQ out+32(FP), DX
	LEAQ (R9)(R9*2), R10
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11
	TESTQ CX, CX
	JEQ f32x4done
f32x4loop:
	VMOVUPS (SI), Y0
	VMULPS (DI), Y0, Y1
	VMULPS (DI)(R9*1), Y0, Y2
	VMULPS (DI)(R9*2), Y0, Y3
	VMULPS (DI)(R10*1), Y0, Y4
	VADDPS Y1, Y8, Y8
	VADDPS Y2, Y9, Y9
	VADDPS Y3, Y10, Y10
	VADDPS Y4, Y11, Y11
	ADDQ $32, SI
	ADDQ $32, DI
	DECQ CX
	JNZ f32x4loop
f32x4done:
	VMOVUPS Y8, 0(DX)
	VMOVUPS Y9, 32(DX)
	VMOVUPS Y10, 64(DX)
	VMOVUPS Y11, 96(DX)
	VZEROUPPER
	RET

// func f16Lanes8x4(w *byte, x *float32, xstride, groups int, out *[32]float32)
// out[8v+l] = lane l of vector v (x + v·xstride bytes), v < 4.
TEXT ·f16Lanes8x4(SB), NOSPLIT, $0-40
	MOVQ w+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ xstride+16(FP), R9
	MOVQ groups+24(FP), CX
	MOVQ out+32(FP), DX
	LEAQ (R9)(R9*2), R10
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11
	TESTQ CX, CX
	JEQ f16x4done
f16x4loop:
	VCVTPH2PS (SI), Y0
	VMULPS (DI), Y0, Y1
	VMULPS (DI)(R9*1), Y0, Y2
	VMULPS (DI)(R9*2), Y0, Y3
	VMULPS (DI)(R10*1), Y0, Y4
	VADDPS Y1, Y8, Y8
	VADDPS Y2, Y9, Y9
	VADDPS Y3, Y10, Y10
	VADDPS Y4, Y11, Y11
	ADDQ $16, SI
	ADDQ $32, DI
	DECQ CX
	JNZ f16x4loop
f16x4done:
	VMOVUPS Y8, 0(DX)
	VMOVUPS Y9, 32(DX)
	VMOVUPS Y10, 64(DX)
	VMOVUPS Y11, 96(DX)
	VZEROUPPER
	RET
