//go:build amd64 && !purego

#include "textflag.h"

// Batched (prefill, verify) Q2_K × Q8_K rows: each super-block of a weight
// row is unpacked once and its scales shuffled once, then dotted with up
// to 8 activation vectors (batchVectors), each with q2kVecs1AVX2's
// integer steps and float step (dot_q23k_amd64.s), so every vector's
// result is bit-identical to dotQ2KQ8KGeneric.

// q2nSh, q2nM03, q2nM0F: q2kVecs1AVX2's scale shuffles and masks
// (dot_q23k_amd64.s; DATA symbols are local to their file).
DATA q2nSh<>+0(SB)/8, $0x8000800080008000
DATA q2nSh<>+8(SB)/8, $0x8000800080008000
DATA q2nSh<>+16(SB)/8, $0x8001800180018001
DATA q2nSh<>+24(SB)/8, $0x8001800180018001
DATA q2nSh<>+32(SB)/8, $0x8002800280028002
DATA q2nSh<>+40(SB)/8, $0x8002800280028002
DATA q2nSh<>+48(SB)/8, $0x8003800380038003
DATA q2nSh<>+56(SB)/8, $0x8003800380038003
DATA q2nSh<>+64(SB)/8, $0x8004800480048004
DATA q2nSh<>+72(SB)/8, $0x8004800480048004
DATA q2nSh<>+80(SB)/8, $0x8005800580058005
DATA q2nSh<>+88(SB)/8, $0x8005800580058005
DATA q2nSh<>+96(SB)/8, $0x8006800680068006
DATA q2nSh<>+104(SB)/8, $0x8006800680068006
DATA q2nSh<>+112(SB)/8, $0x8007800780078007
DATA q2nSh<>+120(SB)/8, $0x8007800780078007
DATA q2nSh<>+128(SB)/8, $0x8008800880088008
DATA q2nSh<>+136(SB)/8, $0x8008800880088008
DATA q2nSh<>+144(SB)/8, $0x8009800980098009
DATA q2nSh<>+152(SB)/8, $0x8009800980098009
DATA q2nSh<>+160(SB)/8, $0x800a800a800a800a
DATA q2nSh<>+168(SB)/8, $0x800a800a800a800a
DATA q2nSh<>+176(SB)/8, $0x800b800b800b800b
DATA q2nSh<>+184(SB)/8, $0x800b800b800b800b
DATA q2nSh<>+192(SB)/8, $0x800c800c800c800c
DATA q2nSh<>+200(SB)/8, $0x800c800c800c800c
DATA q2nSh<>+208(SB)/8, $0x800d800d800d800d
DATA q2nSh<>+216(SB)/8, $0x800d800d800d800d
DATA q2nSh<>+224(SB)/8, $0x800e800e800e800e
DATA q2nSh<>+232(SB)/8, $0x800e800e800e800e
DATA q2nSh<>+240(SB)/8, $0x800f800f800f800f
DATA q2nSh<>+248(SB)/8, $0x800f800f800f800f
GLOBL q2nSh<>(SB), RODATA|NOPTR, $256
DATA q2nM03<>+0(SB)/8, $0x0303030303030303
DATA q2nM03<>+8(SB)/8, $0x0303030303030303
DATA q2nM03<>+16(SB)/8, $0x0303030303030303
DATA q2nM03<>+24(SB)/8, $0x0303030303030303
GLOBL q2nM03<>(SB), RODATA|NOPTR, $32
DATA q2nM0F<>+0(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA q2nM0F<>+8(SB)/8, $0x0f0f0f0f0f0f0f0f
GLOBL q2nM0F<>(SB), RODATA|NOPTR, $16

// Q2NG(MEM, W, S): Y10 += VPMADDWD(S, VPMADDUBSW(W, MEM)). Clobbers Y11.
#define Q2NG(MEM, W, S) \
	VPMADDUBSW MEM, W, Y11 \
	VPMADDWD S, Y11, Y11 \
	VPADDD Y11, Y10, Y10

// Q2NHALF(QOFF): the four groups of one half (weights Y2..Y5, scale
// shuffles Y6..Y9) against the vector at DI, qs at QOFF, into Y10.
#define Q2NHALF(QOFF) \
	VPMADDUBSW (QOFF)(DI), Y2, Y10 \
	VPMADDWD Y6, Y10, Y10 \
	Q2NG((QOFF+32)(DI), Y3, Y7) \
	Q2NG((QOFF+64)(DI), Y4, Y8) \
	Q2NG((QOFF+96)(DI), Y5, Y9)

// Q2NUNPACK(WOFF, G0): the 2-bit groups of the 32 qs bytes at WOFF(SI)
// into Y2..Y5 and the scale pairs of sub-blocks 2·G0.. into Y6..Y9.
#define Q2NUNPACK(WOFF, G0) \
	VMOVDQU WOFF(SI), Y1 \
	VPAND Y14, Y1, Y2 \
	VPSRLW $2, Y1, Y3 \
	VPAND Y14, Y3, Y3 \
	VPSRLW $4, Y1, Y4 \
	VPAND Y14, Y4, Y4 \
	VPSRLW $6, Y1, Y5 \
	VPAND Y14, Y5, Y5 \
	VPSHUFB (32*G0)(R10), Y13, Y6 \
	VPSHUFB (32*G0+32)(R10), Y13, Y7 \
	VPSHUFB (32*G0+64)(R10), Y13, Y8 \
	VPSHUFB (32*G0+96)(R10), Y13, Y9

// func q2kVecsNAVX2(w *byte, rows int, y *blockQ8K, nb, nv int, dst *float32, stride int)
// For rows consecutive Q2_K rows of nb super-blocks and nv (1..8) vectors
// of nb blocks at y, dst[r+v·stride] = row r · vector v.
// Frame: 0..255 the first half's int32 sums per vector, 256..287 sumf per
// vector.
TEXT ·q2kVecsNAVX2(SB), NOSPLIT, $288-56
	MOVQ w+0(FP), SI
	MOVQ dst+40(FP), DX
	MOVQ rows+8(FP), BX
	MOVQ nb+24(FP), R11
	IMULQ $864, R11 // bytes per vector
	LEAQ q2nSh<>(SB), R10
	VMOVDQU q2nM03<>(SB), Y14
	TESTQ BX, BX
	JEQ q2ndone
q2nrow:
	MOVQ nv+32(FP), CX
	LEAQ 256(SP), AX
q2nzero:
	MOVL $0, (AX)
	ADDQ $4, AX
	DECQ CX
	JNZ q2nzero
	MOVQ y+16(FP), R9  // block i of vector 0
	MOVQ nb+24(FP), R8
	TESTQ R8, R8
	JEQ q2nstore
q2nblock:
	PREFETCHT0 4096(SI)
	PREFETCHT0 4160(SI)
	VMOVDQU 0(SI), X0
	VPAND q2nM0F<>(SB), X0, X1 // scales
	VPSRLW $4, X0, X0
	VPAND q2nM0F<>(SB), X0, X0 // mins
	VPMOVZXBW X0, Y0
	VINSERTI128 $1, X1, Y1, Y13
	MOVL 80(SI), AX
	VMOVD AX, X12
	VCVTPH2PS X12, X12 // [d, dmin]
	// first half: sums into the frame
	Q2NUNPACK(16, 0)
	MOVQ R9, DI
	MOVQ nv+32(FP), CX
	MOVQ SP, AX
q2nh0:
	Q2NHALF(4)
	VMOVDQU Y10, (AX)
	ADDQ $32, AX
	ADDQ R11, DI
	DECQ CX
	JNZ q2nh0
	// second half, then the block's float step per vector
	Q2NUNPACK(48, 4)
	MOVQ R9, DI
	MOVQ nv+32(FP), CX
	MOVQ SP, AX
	LEAQ 256(SP), R13
q2nh1:
	Q2NHALF(132)
	VPADDD (AX), Y10, Y10
	VPMADDWD 260(DI), Y0, Y11 // bsums·mins
	VPHADDD Y11, Y10, Y10
	VEXTRACTI128 $1, Y10, X1
	VPADDD X1, X10, X10
	VPHADDD X10, X10, X10
	VCVTDQ2PS X10, X10
	VBROADCASTSS 0(DI), X1
	VMULPS X1, X12, X1
	VMULPS X10, X1, X1
	VMOVSHDUP X1, X11
	VSUBSS X11, X1, X1
	VMOVSS (R13), X11
	VADDSS X1, X11, X11 // sumf += p0 − p1
	VMOVSS X11, (R13)
	ADDQ $4, R13
	ADDQ $32, AX
	ADDQ R11, DI
	DECQ CX
	JNZ q2nh1
	ADDQ $84, SI
	ADDQ $864, R9
	DECQ R8
	JNZ q2nblock
q2nstore:
	MOVQ nv+32(FP), CX
	MOVQ stride+48(FP), R8
	SHLQ $2, R8
	LEAQ 256(SP), AX
	MOVQ DX, DI
q2nst:
	MOVL (AX), R12
	MOVL R12, (DI)
	ADDQ $4, AX
	ADDQ R8, DI
	DECQ CX
	JNZ q2nst
	ADDQ $4, DX
	DECQ BX
	JNZ q2nrow
q2ndone:
	VZEROUPPER
	RET

// q3nPerm, q3nTr, q3nM04, q3n32w: q3kVecs1AVX2's permutes and constants.
DATA q3nM04<>+0(SB)/8, $0x0404040404040404
DATA q3nM04<>+8(SB)/8, $0x0404040404040404
DATA q3nM04<>+16(SB)/8, $0x0404040404040404
DATA q3nM04<>+24(SB)/8, $0x0404040404040404
GLOBL q3nM04<>(SB), RODATA|NOPTR, $32
DATA q3n32w<>+0(SB)/8, $0x0020002000200020
DATA q3n32w<>+8(SB)/8, $0x0020002000200020
DATA q3n32w<>+16(SB)/8, $0x0020002000200020
DATA q3n32w<>+24(SB)/8, $0x0020002000200020
GLOBL q3n32w<>(SB), RODATA|NOPTR, $32
DATA q3nPerm<>+0(SB)/8, $0x0000000200000000
DATA q3nPerm<>+8(SB)/8, $0x0000000600000004
DATA q3nPerm<>+16(SB)/8, $0x0000000300000001
DATA q3nPerm<>+24(SB)/8, $0x0000000700000005
GLOBL q3nPerm<>(SB), RODATA|NOPTR, $32
DATA q3nTr<>+0(SB)/8, $0x0d0905010c080400
DATA q3nTr<>+8(SB)/8, $0x0f0b07030e0a0602
DATA q3nTr<>+16(SB)/8, $0x0d0905010c080400
DATA q3nTr<>+24(SB)/8, $0x0f0b07030e0a0602
GLOBL q3nTr<>(SB), RODATA|NOPTR, $32

// Q3NU(LOSH, HOP, HSH, G): the values + 4 (0..7) of sub-block pair G,
// lane-grouped (low bits at shift LOSH of Y1, high bit from Y3 moved to
// bit 2 by HOP $HSH), stored at frame 32·G. Clobbers Y4, Y5.
#define Q3NU(LOSH, HOP, HSH, G) \
	VPSRLW $LOSH, Y1, Y4 \
	VPAND Y14, Y4, Y4 \
	HOP $HSH, Y3, Y5 \
	VPAND Y11, Y5, Y5 \
	VPOR Y5, Y4, Y4 \
	VMOVDQU Y4, (32*G)(SP)

// Q3NG(G, ACC): ACC += VPMADDWD(scale pair G, VPMADDUBSW(u_G, lqs_G) −
// VPMADDUBSW(4, lqs_G)) for the vector at DI. Clobbers Y4, Y5.
#define Q3NG(G, ACC) \
	VMOVDQU (32*G)(SP), Y4 \
	VPMADDUBSW (608+32*G)(DI), Y4, Y4 \
	VPMADDUBSW (608+32*G)(DI), Y11, Y5 \
	VPSUBW Y5, Y4, Y4 \
	VPMADDWD (256+32*G)(SP), Y4, Y4 \
	VPADDD Y4, ACC, ACC

// func q3kVecsNAVX2(w *byte, rows int, y *blockQ8K, nb, nv int, dst *float32, stride int)
// For rows consecutive Q3_K rows of nb super-blocks and nv (1..8) vectors
// of nb blocks at y (lqs set), dst[r+v·stride] = row r · vector v.
// Frame: 0..255 the block's lane-grouped values + 4 per sub-block pair,
// 256..511 the scale pairs − 32 broadcast per pair, 512..767 the eight
// float lane sums per vector. The 16 scales − 32 are put as int16 at
// 480..511 first: pair 7 is broadcast over them last.
TEXT ·q3kVecsNAVX2(SB), NOSPLIT, $768-56
	MOVQ w+0(FP), SI
	MOVQ dst+40(FP), DX
	MOVQ rows+8(FP), BX
	MOVQ nb+24(FP), R15
	IMULQ $864, R15 // bytes per vector
	VMOVDQU q3nM04<>(SB), Y11
	VMOVDQU q2nM03<>(SB), Y14
	TESTQ BX, BX
	JEQ q3ndone
q3nrow:
	MOVQ nv+32(FP), R10
	LEAQ 512(SP), AX
	VXORPS Y0, Y0, Y0
q3nzero:
	VMOVUPS Y0, (AX)
	ADDQ $32, AX
	DECQ R10
	JNZ q3nzero
	MOVQ y+16(FP), R14
	MOVQ nb+24(FP), R8
	TESTQ R8, R8
	JEQ q3nfold
q3nblock:
	PREFETCHT0 4096(SI)
	PREFETCHT0 4160(SI)
	// scales, as q3kVecs1AVX2
	MOVL 96(SI), AX
	MOVL 100(SI), CX
	MOVL 104(SI), R9
	MOVL AX, R11
	ANDL $0x0f0f0f0f, R11
	MOVL R9, R12
	ANDL $0x03030303, R12
	SHLL $4, R12
	ORL R12, R11
	MOVL CX, R13
	ANDL $0x0f0f0f0f, R13
	MOVL R9, R12
	SHRL $2, R12
	ANDL $0x03030303, R12
	SHLL $4, R12
	ORL R12, R13
	SHLQ $32, R13
	ORQ R13, R11
	SHRL $4, AX
	ANDL $0x0f0f0f0f, AX
	MOVL R9, R12
	SHRL $4, R12
	ANDL $0x03030303, R12
	SHLL $4, R12
	ORL R12, AX
	SHRL $4, CX
	ANDL $0x0f0f0f0f, CX
	SHRL $6, R9
	ANDL $0x03030303, R9
	SHLL $4, R9
	ORL R9, CX
	SHLQ $32, CX
	ORQ CX, AX
	VMOVQ R11, X0
	VPINSRQ $1, AX, X0, X0
	VPMOVZXBW X0, Y0
	VPSUBW q3n32w<>(SB), Y0, Y0
	VMOVDQU Y0, 480(SP)
	VPBROADCASTD 480(SP), Y0
	VMOVDQU Y0, 256(SP)
	VPBROADCASTD 484(SP), Y0
	VMOVDQU Y0, 288(SP)
	VPBROADCASTD 488(SP), Y0
	VMOVDQU Y0, 320(SP)
	VPBROADCASTD 492(SP), Y0
	VMOVDQU Y0, 352(SP)
	VPBROADCASTD 496(SP), Y0
	VMOVDQU Y0, 384(SP)
	VPBROADCASTD 500(SP), Y0
	VMOVDQU Y0, 416(SP)
	VPBROADCASTD 504(SP), Y0
	VMOVDQU Y0, 448(SP)
	VPBROADCASTD 508(SP), Y0
	VMOVDQU Y0, 480(SP)
	// values, lane-grouped
	VMOVDQU q3nPerm<>(SB), Y12
	VMOVDQU q3nTr<>(SB), Y13
	VPERMD 0(SI), Y12, Y3
	VPSHUFB Y13, Y3, Y3 // hmask
	VPERMD 32(SI), Y12, Y1
	VPSHUFB Y13, Y1, Y1
	Q3NU(0, VPSLLW, 2, 0)
	Q3NU(2, VPSLLW, 1, 1)
	Q3NU(4, VPSRLW, 0, 2)
	Q3NU(6, VPSRLW, 1, 3)
	VPERMD 64(SI), Y12, Y1
	VPSHUFB Y13, Y1, Y1
	Q3NU(0, VPSRLW, 2, 4)
	Q3NU(2, VPSRLW, 3, 5)
	Q3NU(4, VPSRLW, 4, 6)
	Q3NU(6, VPSRLW, 5, 7)
	MOVWLZX 108(SI), CX
	VMOVD CX, X15
	VCVTPH2PS X15, X15 // d
	MOVQ R14, DI
	MOVQ nv+32(FP), R10
	LEAQ 512(SP), AX
q3nvec:
	VPXOR Y0, Y0, Y0
	VPXOR Y6, Y6, Y6
	Q3NG(0, Y0)
	Q3NG(1, Y6)
	Q3NG(2, Y0)
	Q3NG(3, Y6)
	Q3NG(4, Y0)
	Q3NG(5, Y6)
	Q3NG(6, Y0)
	Q3NG(7, Y6)
	VPADDD Y6, Y0, Y0
	// sums += (d·y.d)·lanes
	VMULSS 0(DI), X15, X10
	VCVTDQ2PS Y0, Y0
	VBROADCASTSS X10, Y10
	VMULPS Y10, Y0, Y0
	VADDPS (AX), Y0, Y0
	VMOVUPS Y0, (AX)
	ADDQ $32, AX
	ADDQ R15, DI
	DECQ R10
	JNZ q3nvec
	ADDQ $110, SI
	ADDQ $864, R14
	DECQ R8
	JNZ q3nblock
q3nfold:
	// per vector: 0 + sums[0] + ... + sums[7], the lanes taken out in order
	MOVQ nv+32(FP), R10
	MOVQ stride+48(FP), R8
	SHLQ $2, R8
	LEAQ 512(SP), AX
	MOVQ DX, DI
q3nst:
	VMOVUPS (AX), Y15
	VXORPS X0, X0, X0
	VADDSS X15, X0, X0
	VMOVSHDUP X15, X1
	VADDSS X1, X0, X0
	VMOVHLPS X15, X1, X1
	VADDSS X1, X0, X0
	VPERMILPS $0xff, X15, X1
	VADDSS X1, X0, X0
	VEXTRACTF128 $1, Y15, X15
	VADDSS X15, X0, X0
	VMOVSHDUP X15, X1
	VADDSS X1, X0, X0
	VMOVHLPS X15, X1, X1
	VADDSS X1, X0, X0
	VPERMILPS $0xff, X15, X1
	VADDSS X1, X0, X0
	VMOVSS X0, (DI)
	ADDQ $32, AX
	ADDQ R8, DI
	DECQ R10
	JNZ q3nst
	ADDQ $4, DX
	DECQ BX
	JNZ q3nrow
q3ndone:
	VZEROUPPER
	RET
