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

// Q4_K integer lanes, as the archsimd kernel dotQ4KQ8KMadd computes them:
// weight nibbles are interleaved (VPSHUFB) to match blockQ8K.pqs, so each
// VPMADDUBSW pair sums two values of the same mod-8 lane; the two 128-bit
// halves are folded, widened and scaled into the 8 int32 lanes.
DATA q4kIlv<>+0(SB)/8, $0x0b030a0209010800
DATA q4kIlv<>+8(SB)/8, $0x0f070e060d050c04
DATA q4kIlv<>+16(SB)/8, $0x0b030a0209010800
DATA q4kIlv<>+24(SB)/8, $0x0f070e060d050c04
GLOBL q4kIlv<>(SB), RODATA|NOPTR, $32

DATA q4kNib<>+0(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA q4kNib<>+8(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA q4kNib<>+16(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA q4kNib<>+24(SB)/8, $0x0f0f0f0f0f0f0f0f
GLOBL q4kNib<>(SB), RODATA|NOPTR, $32

#define Q4K_SUB(J) \
	VMOVDQU (32*J)(SI), Y1 \
	VPAND Y15, Y1, Y2 \
	VPSRLW $4, Y1, Y3 \
	VPAND Y15, Y3, Y3 \
	VPSHUFB Y14, Y2, Y2 \
	VPSHUFB Y14, Y3, Y3 \
	VPMADDUBSW (64*J)(DI), Y2, Y2 \
	VPMADDUBSW (64*J+32)(DI), Y3, Y3 \
	VEXTRACTI128 $1, Y2, X4 \
	VPADDW X4, X2, X2 \
	VPMOVSXWD X2, Y2 \
	VEXTRACTI128 $1, Y3, X5 \
	VPADDW X5, X3, X3 \
	VPMOVSXWD X3, Y3 \
	VPBROADCASTD (8*J)(BX), Y6 \
	VPMULLD Y6, Y2, Y2 \
	VPADDD Y2, Y0, Y0 \
	VPBROADCASTD (8*J+4)(BX), Y7 \
	VPMULLD Y7, Y3, Y3 \
	VPADDD Y3, Y0, Y0

// func q4kBlockAVX2(q *[128]byte, pq *[256]int8, sc *[8]int32, d float32, sums *[8]float32)
// sums[l] += d·float32(lane l), the generic per-block float update (a
// multiply, then an add, per lane).
TEXT ·q4kBlockAVX2(SB), NOSPLIT, $0-40
	MOVQ q+0(FP), SI
	MOVQ pq+8(FP), DI
	MOVQ sc+16(FP), BX
	MOVQ sums+32(FP), DX
	VMOVDQU q4kNib<>(SB), Y15
	VMOVDQU q4kIlv<>(SB), Y14
	VPXOR Y0, Y0, Y0
	Q4K_SUB(0)
	Q4K_SUB(1)
	Q4K_SUB(2)
	Q4K_SUB(3)
	VCVTDQ2PS Y0, Y0
	VBROADCASTSS d+24(FP), Y1
	VMULPS Y1, Y0, Y0
	VMOVUPS (DX), Y2
	VADDPS Y0, Y2, Y2
	VMOVUPS Y2, (DX)
	VZEROUPPER
	RET
