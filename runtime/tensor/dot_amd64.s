//go:build amd64 && !purego

#include "textflag.h"

// long file: the row kernels below share file-local DATA constants (name<>)
// and #define macros, which Go assembly cannot share across files; split,
// each file would repeat them.

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

DATA q6kTwo<>+0(SB)/8, $0x2020202020202020
DATA q6kTwo<>+8(SB)/8, $0x2020202020202020
DATA q6kTwo<>+16(SB)/8, $0x2020202020202020
DATA q6kTwo<>+24(SB)/8, $0x2020202020202020
GLOBL q6kTwo<>(SB), RODATA|NOPTR, $32

DATA q6kThree<>+0(SB)/8, $0x0303030303030303
DATA q6kThree<>+8(SB)/8, $0x0303030303030303
DATA q6kThree<>+16(SB)/8, $0x0303030303030303
DATA q6kThree<>+24(SB)/8, $0x0303030303030303
GLOBL q6kThree<>(SB), RODATA|NOPTR, $32

// Q6K_QUARTER(SRC, SHIFTLO, HSHIFT, PQOFF, SCOFF): 32 values of one quarter:
// low (SHIFTLO=0) or high nibbles of SRC, two bits of the qh register Y9
// shifted by HSHIFT, interleaved, multiplied with the activation at PQOFF
// (minus 32·pair sums), and scaled by sc[SCOFF/4] / sc[SCOFF/4+1] into Y0.
#define Q6K_QUARTER(SRC, SHIFTLO, HSHIFT, PQOFF, SCOFF) \
	VPSRLW $SHIFTLO, SRC, Y1 \
	VPAND Y15, Y1, Y1 \
	VPSRLW $HSHIFT, Y9, Y2 \
	VPAND Y13, Y2, Y2 \
	VPSLLW $4, Y2, Y2 \
	VPOR Y2, Y1, Y1 \
	VPSHUFB Y14, Y1, Y1 \
	VMOVDQU (PQOFF)(DI), Y3 \
	VPMADDUBSW Y3, Y1, Y1 \
	VPMADDUBSW Y3, Y12, Y4 \
	VPSUBW Y4, Y1, Y1 \
	VPMOVSXWD X1, Y5 \
	VPBROADCASTD (SCOFF)(BX), Y6 \
	VPMULLD Y6, Y5, Y5 \
	VPADDD Y5, Y0, Y0 \
	VEXTRACTI128 $1, Y1, X1 \
	VPMOVSXWD X1, Y5 \
	VPBROADCASTD (SCOFF+4)(BX), Y6 \
	VPMULLD Y6, Y5, Y5 \
	VPADDD Y5, Y0, Y0

DATA q5Idx<>+0(SB)/8, $0x0000000000000000
DATA q5Idx<>+8(SB)/8, $0x0101010101010101
DATA q5Idx<>+16(SB)/8, $0x0202020202020202
DATA q5Idx<>+24(SB)/8, $0x0303030303030303
GLOBL q5Idx<>(SB), RODATA|NOPTR, $32

DATA q5Bit<>+0(SB)/8, $0x8040201008040201
DATA q5Bit<>+8(SB)/8, $0x8040201008040201
GLOBL q5Bit<>(SB), RODATA|NOPTR, $16

DATA q5F0<>+0(SB)/8, $0xf0f0f0f0f0f0f0f0
DATA q5F0<>+8(SB)/8, $0xf0f0f0f0f0f0f0f0
GLOBL q5F0<>(SB), RODATA|NOPTR, $16

// func q5_0SumsAVX2(w *byte, y *blockQ8_0, nb int, out *int32)
// out[i] = Σ (value-16)·y[i].qs for nb Q5_0 blocks (22-byte blocks). The
// fifth bits are expanded to byte masks (VPSHUFB of the broadcast qh, then a
// compare with the bit), and value-16 = nibble | (^mask & 0xF0) as int8.
TEXT ·q5_0SumsAVX2(SB), NOSPLIT, $0-32
	MOVQ w+0(FP), SI
	MOVQ y+8(FP), DI
	MOVQ nb+16(FP), CX
	MOVQ out+24(FP), DX
	VMOVDQU q4kNib<>(SB), X15
	VMOVDQU q5Idx<>(SB), X13
	VMOVDQU q5Idx<>+16(SB), X11
	VMOVDQU q5Bit<>(SB), X12
	VMOVDQU q5F0<>(SB), X10
	TESTQ CX, CX
	JEQ q5done
q5loop:
	VMOVDQU 6(SI), X1
	VPAND X15, X1, X2
	VPSRLW $4, X1, X3
	VPAND X15, X3, X3
	VPBROADCASTD 2(SI), X4
	VPSHUFB X13, X4, X5
	VPAND X12, X5, X5
	VPCMPEQB X12, X5, X5
	VPSHUFB X11, X4, X6
	VPAND X12, X6, X6
	VPCMPEQB X12, X6, X6
	VPANDN X10, X5, X5
	VPANDN X10, X6, X6
	VPOR X5, X2, X2
	VPOR X6, X3, X3
	VPMOVSXBW X2, Y2
	VPMOVSXBW X3, Y3
	VPMOVSXBW 4(DI), Y7
	VPMOVSXBW 20(DI), Y8
	VPMADDWD Y7, Y2, Y2
	VPMADDWD Y8, Y3, Y3
	VPADDD Y3, Y2, Y1
	VEXTRACTI128 $1, Y1, X2
	VPADDD X2, X1, X1
	VPSHUFD $0x4e, X1, X2
	VPADDD X2, X1, X1
	VPSHUFD $0xb1, X1, X2
	VPADDD X2, X1, X1
	VMOVD X1, AX
	MOVL AX, (DX)
	ADDQ $22, SI
	ADDQ $36, DI
	ADDQ $4, DX
	DECQ CX
	JNZ q5loop
q5done:
	VZEROUPPER
	RET

DATA q5kOne<>+0(SB)/8, $0x0101010101010101
DATA q5kOne<>+8(SB)/8, $0x0101010101010101
DATA q5kOne<>+16(SB)/8, $0x0101010101010101
DATA q5kOne<>+24(SB)/8, $0x0101010101010101
GLOBL q5kOne<>(SB), RODATA|NOPTR, $32

// Q5K_SUB(J): sub-blocks 2J (low nibbles, qh bit 2J) and 2J+1 (high
// nibbles, qh bit 2J+1); qh is in Y9.
#define Q5K_SUB(J) \
	VMOVDQU (32*J)(SI), Y1 \
	VPAND Y15, Y1, Y2 \
	VPSRLW $4, Y1, Y3 \
	VPAND Y15, Y3, Y3 \
	VPSRLW $(2*J), Y9, Y4 \
	VPAND Y13, Y4, Y4 \
	VPSLLW $4, Y4, Y4 \
	VPOR Y4, Y2, Y2 \
	VPSRLW $(2*J+1), Y9, Y4 \
	VPAND Y13, Y4, Y4 \
	VPSLLW $4, Y4, Y4 \
	VPOR Y4, Y3, Y3 \
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

DATA q4Eight<>+0(SB)/8, $0x0808080808080808
DATA q4Eight<>+8(SB)/8, $0x0808080808080808
GLOBL q4Eight<>(SB), RODATA|NOPTR, $16

// func q4_0SumsAVX2(w *byte, y *blockQ8_0, nb int, out *int32)
// out[i] = Σ (nibble-8)·y[i].qs for nb Q4_0 blocks (18-byte blocks).
TEXT ·q4_0SumsAVX2(SB), NOSPLIT, $0-32
	MOVQ w+0(FP), SI
	MOVQ y+8(FP), DI
	MOVQ nb+16(FP), CX
	MOVQ out+24(FP), DX
	VMOVDQU q4kNib<>(SB), X15
	VMOVDQU q4Eight<>(SB), X14
	TESTQ CX, CX
	JEQ q4done
q4loop:
	VMOVDQU 2(SI), X1
	VPAND X15, X1, X2
	VPSRLW $4, X1, X3
	VPAND X15, X3, X3
	VPSUBB X14, X2, X2
	VPSUBB X14, X3, X3
	VPMOVSXBW X2, Y2
	VPMOVSXBW X3, Y3
	VPMOVSXBW 4(DI), Y7
	VPMOVSXBW 20(DI), Y8
	VPMADDWD Y7, Y2, Y2
	VPMADDWD Y8, Y3, Y3
	VPADDD Y3, Y2, Y1
	VEXTRACTI128 $1, Y1, X2
	VPADDD X2, X1, X1
	VPSHUFD $0x4e, X1, X2
	VPADDD X2, X1, X1
	VPSHUFD $0xb1, X1, X2
	VPADDD X2, X1, X1
	VMOVD X1, AX
	MOVL AX, (DX)
	ADDQ $18, SI
	ADDQ $36, DI
	ADDQ $4, DX
	DECQ CX
	JNZ q4loop
q4done:
	VZEROUPPER
	RET

// func q4kRowAVX2(w *byte, y *blockQ8K, nb int) float32
// The whole dotQ4KQ8KGeneric for one row of nb Q4_K blocks: kmask scale and
// min unpacking, the mins term (VPMADDWD with bsum2), the interleaved
// VPMADDUBSW lanes, and the float combination in the generic order —
// sums[l] += d·lane (vector, per lane), sumf -= dmin·sumi (scalar), then
// sumf += sums[0..7] in order. blockQ8K offsets: d 0, pqs 292, bsum2 548,
// size 864 (checked by TestBlockQ8KLayout).
TEXT ·q4kRowAVX2(SB), NOSPLIT, $32-28
	MOVQ w+0(FP), SI
	MOVQ y+8(FP), DI
	MOVQ nb+16(FP), R8
	VMOVDQU q4kNib<>(SB), Y15
	VMOVDQU q4kIlv<>(SB), Y14
	VXORPS Y12, Y12, Y12 // sums
	VXORPS X13, X13, X13 // sumf
	TESTQ R8, R8
	JEQ q4rowdone
q4rowloop:
	// scales s0,s1 and mins m0,m1 (ggml kmask shuffle)
	MOVL 4(SI), AX
	MOVL 8(SI), BX
	MOVL 12(SI), CX
	MOVL AX, DX
	ANDL $0x3f3f3f3f, DX // s0
	MOVL AX, R9
	SHRL $6, R9
	ANDL $0x03030303, R9
	SHLL $4, R9
	MOVL CX, R10
	ANDL $0x0f0f0f0f, R10
	ORL R10, R9 // s1
	SHLQ $32, R9
	ORQ R9, DX // s0 | s1<<32
	VMOVQ DX, X8
	VPMOVZXBD X8, Y8
	VMOVDQU Y8, 0(SP) // sc[0..7] as int32
	MOVL BX, DX
	ANDL $0x3f3f3f3f, DX // m0
	MOVL BX, R9
	SHRL $6, R9
	ANDL $0x03030303, R9
	SHLL $4, R9
	MOVL CX, R10
	SHRL $4, R10
	ANDL $0x0f0f0f0f, R10
	ORL R10, R9 // m1
	SHLQ $32, R9
	ORQ R9, DX
	VMOVQ DX, X9
	VPMOVZXBW X9, X9
	VPMADDWD 548(DI), X9, X9
	VPSHUFD $0x4e, X9, X10
	VPADDD X10, X9, X9
	VPSHUFD $0xb1, X9, X10
	VPADDD X10, X9, X9
	VMOVD X9, AX // sumi
	// lanes
	ADDQ $16, SI
	ADDQ $292, DI
	VPXOR Y0, Y0, Y0
	MOVQ SP, BX
	Q4K_SUB(0)
	Q4K_SUB(1)
	Q4K_SUB(2)
	Q4K_SUB(3)
	SUBQ $16, SI
	SUBQ $292, DI
	// d = f16(x.d)·y.d ; sums += d·lanes
	MOVWLZX 0(SI), CX
	VMOVD CX, X10
	VCVTPH2PS X10, X10
	VMULSS 0(DI), X10, X10
	VCVTDQ2PS Y0, Y0
	VBROADCASTSS X10, Y10
	VMULPS Y10, Y0, Y0
	VADDPS Y0, Y12, Y12
	// dmin = f16(x.dmin)·y.d ; sumf -= dmin·float32(sumi)
	MOVWLZX 2(SI), CX
	VMOVD CX, X11
	VCVTPH2PS X11, X11
	VMULSS 0(DI), X11, X11
	VCVTSI2SSL AX, X10, X10
	VMULSS X10, X11, X11
	VSUBSS X11, X13, X13
	ADDQ $144, SI
	ADDQ $864, DI
	DECQ R8
	JNZ q4rowloop
q4rowdone:
	// sumf += sums[l], l = 0..7 in order
	VMOVUPS Y12, 0(SP)
	VADDSS 0(SP), X13, X13
	VADDSS 4(SP), X13, X13
	VADDSS 8(SP), X13, X13
	VADDSS 12(SP), X13, X13
	VADDSS 16(SP), X13, X13
	VADDSS 20(SP), X13, X13
	VADDSS 24(SP), X13, X13
	VADDSS 28(SP), X13, X13
	VZEROUPPER
	MOVSS X13, ret+24(FP)
	RET

// func q5kRowAVX2(w *byte, y *blockQ8K, nb int) float32
// q4kRowAVX2 for Q5_K (176-byte blocks: d, dmin, scales[12], qh[32],
// qs[128]). Registers: Y9 qh and Y13 ones are used by Q5K_SUB; sums in Y12,
// sumf in X11.
TEXT ·q5kRowAVX2(SB), NOSPLIT, $32-28
	MOVQ w+0(FP), SI
	MOVQ y+8(FP), DI
	MOVQ nb+16(FP), R8
	VMOVDQU q4kNib<>(SB), Y15
	VMOVDQU q4kIlv<>(SB), Y14
	VMOVDQU q5kOne<>(SB), Y13
	VXORPS Y12, Y12, Y12 // sums
	VXORPS X11, X11, X11 // sumf
	TESTQ R8, R8
	JEQ q5rowdone
q5rowloop:
	MOVL 4(SI), AX
	MOVL 8(SI), BX
	MOVL 12(SI), CX
	MOVL AX, DX
	ANDL $0x3f3f3f3f, DX
	MOVL AX, R9
	SHRL $6, R9
	ANDL $0x03030303, R9
	SHLL $4, R9
	MOVL CX, R10
	ANDL $0x0f0f0f0f, R10
	ORL R10, R9
	SHLQ $32, R9
	ORQ R9, DX
	VMOVQ DX, X8
	VPMOVZXBD X8, Y8
	VMOVDQU Y8, 0(SP)
	MOVL BX, DX
	ANDL $0x3f3f3f3f, DX
	MOVL BX, R9
	SHRL $6, R9
	ANDL $0x03030303, R9
	SHLL $4, R9
	MOVL CX, R10
	SHRL $4, R10
	ANDL $0x0f0f0f0f, R10
	ORL R10, R9
	SHLQ $32, R9
	ORQ R9, DX
	VMOVQ DX, X10
	VPMOVZXBW X10, X10
	VPMADDWD 548(DI), X10, X10
	VPSHUFD $0x4e, X10, X8
	VPADDD X8, X10, X10
	VPSHUFD $0xb1, X10, X8
	VPADDD X8, X10, X10
	VMOVD X10, AX // sumi
	VMOVDQU 16(SI), Y9 // qh
	ADDQ $48, SI
	ADDQ $292, DI
	VPXOR Y0, Y0, Y0
	MOVQ SP, BX
	Q5K_SUB(0)
	Q5K_SUB(1)
	Q5K_SUB(2)
	Q5K_SUB(3)
	SUBQ $48, SI
	SUBQ $292, DI
	MOVWLZX 0(SI), CX
	VMOVD CX, X10
	VCVTPH2PS X10, X10
	VMULSS 0(DI), X10, X10
	VCVTDQ2PS Y0, Y0
	VBROADCASTSS X10, Y10
	VMULPS Y10, Y0, Y0
	VADDPS Y0, Y12, Y12
	MOVWLZX 2(SI), CX
	VMOVD CX, X8
	VCVTPH2PS X8, X8
	VMULSS 0(DI), X8, X8
	VCVTSI2SSL AX, X10, X10
	VMULSS X10, X8, X8
	VSUBSS X8, X11, X11
	ADDQ $176, SI
	ADDQ $864, DI
	DECQ R8
	JNZ q5rowloop
q5rowdone:
	VMOVUPS Y12, 0(SP)
	VADDSS 0(SP), X11, X11
	VADDSS 4(SP), X11, X11
	VADDSS 8(SP), X11, X11
	VADDSS 12(SP), X11, X11
	VADDSS 16(SP), X11, X11
	VADDSS 20(SP), X11, X11
	VADDSS 24(SP), X11, X11
	VADDSS 28(SP), X11, X11
	VZEROUPPER
	MOVSS X11, ret+24(FP)
	RET

// func q6kRowAVX2(w *byte, y *blockQ8K, nb int) float32
// The whole dotQ6KQ8KGeneric for one row of nb Q6_K blocks (210 bytes: ql,
// qh, int8 scales[16], d). Sums in Y10; scales sign-extended to the frame.
TEXT ·q6kRowAVX2(SB), NOSPLIT, $64-28
	MOVQ w+0(FP), SI
	MOVQ y+8(FP), R11
	MOVQ nb+16(FP), R8
	VMOVDQU q4kNib<>(SB), Y15
	VMOVDQU q4kIlv<>(SB), Y14
	VMOVDQU q6kThree<>(SB), Y13
	VMOVDQU q6kTwo<>(SB), Y12
	VXORPS Y10, Y10, Y10 // sums
	TESTQ R8, R8
	JEQ q6rowdone
q6rowloop:
	VPMOVSXBD 192(SI), Y1
	VPMOVSXBD 200(SI), Y2
	VMOVDQU Y1, 0(SP)
	VMOVDQU Y2, 32(SP)
	MOVQ SP, BX
	LEAQ 292(R11), DI
	VPXOR Y0, Y0, Y0
	VMOVDQU 0(SI), Y7
	VMOVDQU 32(SI), Y8
	VMOVDQU 128(SI), Y9
	Q6K_QUARTER(Y7, 0, 0, 0, 0)
	Q6K_QUARTER(Y8, 0, 2, 32, 8)
	Q6K_QUARTER(Y7, 4, 4, 64, 16)
	Q6K_QUARTER(Y8, 4, 6, 96, 24)
	VMOVDQU 64(SI), Y7
	VMOVDQU 96(SI), Y8
	VMOVDQU 160(SI), Y9
	Q6K_QUARTER(Y7, 0, 0, 128, 32)
	Q6K_QUARTER(Y8, 0, 2, 160, 40)
	Q6K_QUARTER(Y7, 4, 4, 192, 48)
	Q6K_QUARTER(Y8, 4, 6, 224, 56)
	MOVWLZX 208(SI), CX
	VMOVD CX, X11
	VCVTPH2PS X11, X11
	VMULSS 0(R11), X11, X11
	VCVTDQ2PS Y0, Y0
	VBROADCASTSS X11, Y11
	VMULPS Y11, Y0, Y0
	VADDPS Y0, Y10, Y10
	ADDQ $210, SI
	ADDQ $864, R11
	DECQ R8
	JNZ q6rowloop
q6rowdone:
	VMOVUPS Y10, 0(SP)
	VXORPS X11, X11, X11
	VADDSS 0(SP), X11, X11
	VADDSS 4(SP), X11, X11
	VADDSS 8(SP), X11, X11
	VADDSS 12(SP), X11, X11
	VADDSS 16(SP), X11, X11
	VADDSS 20(SP), X11, X11
	VADDSS 24(SP), X11, X11
	VADDSS 28(SP), X11, X11
	VZEROUPPER
	MOVSS X11, ret+24(FP)
	RET

// func q8_0RowAVX2(w *byte, y *blockQ8_0, nb int) float32
// The whole dotQ8_0Q8_0Generic for one row: per block the exact integer
// sum, then sumf += float32(sumi)·(dx·dy) in the generic order.
TEXT ·q8_0RowAVX2(SB), NOSPLIT, $0-28
	MOVQ w+0(FP), SI
	MOVQ y+8(FP), DI
	MOVQ nb+16(FP), CX
	VXORPS X13, X13, X13
	TESTQ CX, CX
	JEQ q8rowdone
q8rowloop:
	VPMOVSXBW 2(SI), Y1
	VPMOVSXBW 18(SI), Y2
	VPMOVSXBW 4(DI), Y3
	VPMOVSXBW 20(DI), Y4
	VPMADDWD Y3, Y1, Y1
	VPMADDWD Y4, Y2, Y2
	VPADDD Y2, Y1, Y1
	VEXTRACTI128 $1, Y1, X2
	VPADDD X2, X1, X1
	VPSHUFD $0x4e, X1, X2
	VPADDD X2, X1, X1
	VPSHUFD $0xb1, X1, X2
	VPADDD X2, X1, X1
	VMOVD X1, AX
	MOVWLZX 0(SI), DX
	VMOVD DX, X5
	VCVTPH2PS X5, X5
	VMULSS 0(DI), X5, X5 // dx·dy
	VCVTSI2SSL AX, X6, X6
	VMULSS X5, X6, X6 // float32(sumi)·(dx·dy)
	VADDSS X6, X13, X13
	ADDQ $34, SI
	ADDQ $36, DI
	DECQ CX
	JNZ q8rowloop
q8rowdone:
	VZEROUPPER
	MOVSS X13, ret+24(FP)
	RET
