//go:build amd64 && !purego

#include "textflag.h"

// q8kBlockAVX2 is quantizeQ8KGo for one block with permuteQ8K set (see
// q8k_amd64.go): the same float operations per value (iscale·x, then the
// nearest_int magic add and mask, then min 127), the low byte of each int32
// kept as Go's int8 conversion keeps it (mask, then unsigned packs, exact
// for 0..255), and the integer sums formed in int32 (exact).

DATA q8kAbs<>+0(SB)/4, $0x7fffffff
DATA q8kAbs<>+4(SB)/4, $0xc2fe0000 // -127.0
DATA q8kAbs<>+8(SB)/4, $0x3f800000 // 1.0
DATA q8kAbs<>+12(SB)/4, $0x4b400000 // 12582912.0
DATA q8kAbs<>+16(SB)/4, $0x007fffff
DATA q8kAbs<>+20(SB)/4, $0x00400000
DATA q8kAbs<>+24(SB)/4, $127
DATA q8kAbs<>+28(SB)/4, $0xff
DATA q8kAbs<>+32(SB)/4, $0x01010101
DATA q8kAbs<>+36(SB)/4, $0x00010001
GLOBL q8kAbs<>(SB), RODATA|NOPTR, $40

// q8kPerm puts the dwords of the packed bytes back in element order.
DATA q8kPerm<>+0(SB)/8, $0x0000000400000000
DATA q8kPerm<>+8(SB)/8, $0x0000000500000001
DATA q8kPerm<>+16(SB)/8, $0x0000000600000002
DATA q8kPerm<>+24(SB)/8, $0x0000000700000003
GLOBL q8kPerm<>(SB), RODATA|NOPTR, $32

// q8kTr is a 4×4 byte transpose per 128-bit half (blockQ8K.lqs order).
DATA q8kTr<>+0(SB)/8, $0x0d0905010c080400
DATA q8kTr<>+8(SB)/8, $0x0f0b07030e0a0602
DATA q8kTr<>+16(SB)/8, $0x0d0905010c080400
DATA q8kTr<>+24(SB)/8, $0x0f0b07030e0a0602
GLOBL q8kTr<>(SB), RODATA|NOPTR, $32

// q8kPq picks bytes 0,4,1,5,2,6,3,7, 8,12,9,13,10,14,11,15 per half
// (blockQ8K.pqs order, before a VPERMQ of the quadwords).
DATA q8kPq<>+0(SB)/8, $0x0703060205010400
DATA q8kPq<>+8(SB)/8, $0x0f0b0e0a0d090c08
DATA q8kPq<>+16(SB)/8, $0x0703060205010400
DATA q8kPq<>+24(SB)/8, $0x0f0b0e0a0d090c08
GLOBL q8kPq<>(SB), RODATA|NOPTR, $32

// func q8kBlockAVX2(x *float32, b *blockQ8K) bool
// Quantizes the 256 values at x into *b (d, qs, bsums, pqs, bsum2[0:8],
// lqs) and returns true, or returns false without writing when they are
// all zero. Frame: the int32 sums of four of each 32-value group (8×32
// bytes). blockQ8K offsets: d 0, qs 4, bsums 260, pqs 292, bsum2 548, lqs
// 608 (TestBlockQ8KLayout).
TEXT ·q8kBlockAVX2(SB), NOSPLIT, $256-17
	MOVQ x+0(FP), SI
	MOVQ b+8(FP), DI
	VBROADCASTSS q8kAbs<>+0(SB), Y15
	// amax: the largest |x| (a NaN never replaces the running maximum)
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	MOVQ SI, R8
	MOVQ $8, CX
q8kmax:
	VANDPS 0(R8), Y15, Y2
	VANDPS 32(R8), Y15, Y3
	VANDPS 64(R8), Y15, Y4
	VANDPS 96(R8), Y15, Y5
	VMAXPS Y0, Y2, Y0
	VMAXPS Y1, Y3, Y1
	VMAXPS Y0, Y4, Y0
	VMAXPS Y1, Y5, Y1
	ADDQ $128, R8
	DECQ CX
	JNZ q8kmax
	VMAXPS Y0, Y1, Y0
	VPERM2F128 $1, Y0, Y0, Y1
	VMAXPS Y0, Y1, Y0
	VSHUFPS $0x4e, Y0, Y0, Y1
	VMAXPS Y0, Y1, Y0
	VSHUFPS $0xb1, Y0, Y0, Y1
	VMAXPS Y0, Y1, Y0
	VXORPS X1, X1, X1
	VUCOMISS X1, X0
	JNE q8knonzero
	MOVB $0, ret+16(FP)
	VZEROUPPER
	RET
q8knonzero:
	// mx: the first value whose |x| is amax, with its sign
	XORQ AX, AX
	MOVQ SI, R8
q8kfind:
	VANDPS 0(R8), Y15, Y2
	VCMPPS $0, Y0, Y2, Y2
	VMOVMSKPS Y2, DX
	TESTL DX, DX
	JNZ q8kfound
	ADDQ $32, R8
	ADDQ $8, AX
	CMPQ AX, $256
	JLT q8kfind
	XORQ AX, AX
	MOVL $1, DX
q8kfound:
	BSFL DX, DX
	ADDQ DX, AX
	VMOVSS (SI)(AX*4), X1
	// iscale = -127/mx, d = 1/iscale
	VMOVSS q8kAbs<>+4(SB), X2
	VDIVSS X1, X2, X2
	VMOVSS q8kAbs<>+8(SB), X3
	VDIVSS X2, X3, X3
	VMOVSS X3, 0(DI)
	VBROADCASTSS X2, Y2
	VBROADCASTSS q8kAbs<>+12(SB), Y3
	VPBROADCASTD q8kAbs<>+16(SB), Y4
	VPBROADCASTD q8kAbs<>+20(SB), Y5
	VPBROADCASTD q8kAbs<>+24(SB), Y6
	VPBROADCASTD q8kAbs<>+28(SB), Y7
	VMOVDQU q8kPerm<>(SB), Y8
	VMOVDQU q8kTr<>(SB), Y9
	VMOVDQU q8kPq<>(SB), Y10
	VPBROADCASTD q8kAbs<>+32(SB), Y11
	VPBROADCASTD q8kAbs<>+36(SB), Y12
	MOVQ SI, R8
	MOVQ DI, R9
	XORQ R10, R10
	MOVQ $8, CX
q8kgroup:
	// q = min(127, nearest_int(iscale·x)) for the 32 values of the group
	VMULPS 0(R8), Y2, Y0
	VMULPS 32(R8), Y2, Y1
	VMULPS 64(R8), Y2, Y13
	VMULPS 96(R8), Y2, Y14
	VADDPS Y3, Y0, Y0
	VADDPS Y3, Y1, Y1
	VADDPS Y3, Y13, Y13
	VADDPS Y3, Y14, Y14
	VPAND Y4, Y0, Y0
	VPAND Y4, Y1, Y1
	VPAND Y4, Y13, Y13
	VPAND Y4, Y14, Y14
	VPSUBD Y5, Y0, Y0
	VPSUBD Y5, Y1, Y1
	VPSUBD Y5, Y13, Y13
	VPSUBD Y5, Y14, Y14
	VPMINSD Y6, Y0, Y0
	VPMINSD Y6, Y1, Y1
	VPMINSD Y6, Y13, Y13
	VPMINSD Y6, Y14, Y14
	VPAND Y7, Y0, Y0
	VPAND Y7, Y1, Y1
	VPAND Y7, Y13, Y13
	VPAND Y7, Y14, Y14
	// packed dwords: q0-3 q8-11 q16-19 q24-27 | q4-7 q12-15 q20-23 q28-31
	VPACKUSDW Y1, Y0, Y0
	VPACKUSDW Y14, Y13, Y13
	VPACKUSWB Y13, Y0, Y0
	VPERMD Y0, Y8, Y1
	VMOVDQU Y1, 4(R9)
	VPSHUFB Y9, Y0, Y13
	VMOVDQU Y13, 608(R9)
	VPSHUFB Y10, Y0, Y14
	VPERMQ $0xd8, Y14, Y14
	VMOVDQU Y14, 292(R9)
	// sums of four for the bsums
	VPMADDUBSW Y1, Y11, Y1
	VPMADDWD Y12, Y1, Y1
	VMOVDQU Y1, (SP)(R10*1)
	ADDQ $128, R8
	ADDQ $32, R9
	ADDQ $32, R10
	DECQ CX
	JNZ q8kgroup
	// stack k holds 16-groups 2k (low half) and 2k+1 (high half)
	VMOVDQU 0(SP), Y0
	VPHADDD 32(SP), Y0, Y0
	VMOVDQU 64(SP), Y1
	VPHADDD 96(SP), Y1, Y1
	VPHADDD Y1, Y0, Y0 // g0 g2 g4 g6 | g1 g3 g5 g7
	VMOVDQU 128(SP), Y1
	VPHADDD 160(SP), Y1, Y1
	VMOVDQU 192(SP), Y13
	VPHADDD 224(SP), Y13, Y13
	VPHADDD Y13, Y1, Y1 // g8 g10 g12 g14 | g9 g11 g13 g15
	VPACKSSDW Y1, Y0, Y13
	VEXTRACTI128 $1, Y13, X14
	VPUNPCKLWD X14, X13, X15
	VPUNPCKHWD X14, X13, X14
	VMOVDQU X15, 260(DI)
	VMOVDQU X14, 276(DI)
	VEXTRACTI128 $1, Y0, X13
	VPADDD X13, X0, X0
	VEXTRACTI128 $1, Y1, X13
	VPADDD X13, X1, X1
	VPACKSSDW X1, X0, X0
	VMOVDQU X0, 548(DI)
	MOVB $1, ret+16(FP)
	VZEROUPPER
	RET
