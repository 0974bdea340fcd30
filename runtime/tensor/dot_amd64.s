//go:build amd64 && !purego

#include "textflag.h"

// Float dot products in the generic 8-lane order: one YMM accumulator whose
// lane l sums w[8g+l]*x[8g+l] over groups g, each product rounded (VMULPS)
// and then added (VADDPS) — no FMA — so the result equals dotF32Generic /
// dotF16Generic / dotBF16Generic bit for bit. Two groups are loaded and
// multiplied per iteration; their adds stay in order.

// func f32Lanes8(w *byte, x *float32, groups int, out *[8]float32)
TEXT ·f32Lanes8(SB), NOSPLIT, $0-32
	MOVQ w+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ groups+16(FP), CX
	MOVQ out+24(FP), DX
	VXORPS Y0, Y0, Y0
f32pair:
	CMPQ CX, $2
	JLT f32tail
	VMOVUPS (SI), Y1
	VMULPS (DI), Y1, Y1
	VMOVUPS 32(SI), Y2
	VMULPS 32(DI), Y2, Y2
	VADDPS Y1, Y0, Y0
	VADDPS Y2, Y0, Y0
	ADDQ $64, SI
	ADDQ $64, DI
	SUBQ $2, CX
	JMP f32pair
f32tail:
	TESTQ CX, CX
	JEQ f32done
	VMOVUPS (SI), Y1
	VMULPS (DI), Y1, Y1
	VADDPS Y1, Y0, Y0
f32done:
	VMOVUPS Y0, (DX)
	VZEROUPPER
	RET

// func f16Lanes8(w *byte, x *float32, groups int, out *[8]float32)
TEXT ·f16Lanes8(SB), NOSPLIT, $0-32
	MOVQ w+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ groups+16(FP), CX
	MOVQ out+24(FP), DX
	VXORPS Y0, Y0, Y0
f16pair:
	CMPQ CX, $2
	JLT f16tail
	VCVTPH2PS (SI), Y1
	VMULPS (DI), Y1, Y1
	VCVTPH2PS 16(SI), Y2
	VMULPS 32(DI), Y2, Y2
	VADDPS Y1, Y0, Y0
	VADDPS Y2, Y0, Y0
	ADDQ $32, SI
	ADDQ $64, DI
	SUBQ $2, CX
	JMP f16pair
f16tail:
	TESTQ CX, CX
	JEQ f16done
	VCVTPH2PS (SI), Y1
	VMULPS (DI), Y1, Y1
	VADDPS Y1, Y0, Y0
f16done:
	VMOVUPS Y0, (DX)
	VZEROUPPER
	RET

// func bf16Lanes8(w *byte, x *float32, groups int, out *[8]float32)
TEXT ·bf16Lanes8(SB), NOSPLIT, $0-32
	MOVQ w+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ groups+16(FP), CX
	MOVQ out+24(FP), DX
	VXORPS Y0, Y0, Y0
bf16pair:
	CMPQ CX, $2
	JLT bf16tail
	VPMOVZXWD (SI), Y1
	VPSLLD $16, Y1, Y1
	VMULPS (DI), Y1, Y1
	VPMOVZXWD 16(SI), Y2
	VPSLLD $16, Y2, Y2
	VMULPS 32(DI), Y2, Y2
	VADDPS Y1, Y0, Y0
	VADDPS Y2, Y0, Y0
	ADDQ $32, SI
	ADDQ $64, DI
	SUBQ $2, CX
	JMP bf16pair
bf16tail:
	TESTQ CX, CX
	JEQ bf16done
	VPMOVZXWD (SI), Y1
	VPSLLD $16, Y1, Y1
	VMULPS (DI), Y1, Y1
	VADDPS Y1, Y0, Y0
bf16done:
	VMOVUPS Y0, (DX)
	VZEROUPPER
	RET
