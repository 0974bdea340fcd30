//go:build amd64 && !purego

#include "textflag.h"

// Batched Q4_K × Q8_K rows (q4kRowsAVX2): one weight row, decoded once per
// super-block, dotted with nv activation vectors. The integer lanes are
// ggml-generic's aux32[8] (lane = element index mod 8) computed without any
// widening multiply: the weight bytes of each 32-value sub-block are
// reordered (VPERMD, then a 4×4 byte transpose with VPSHUFB) so that bytes
// 4l..4l+3 hold elements l, l+8, l+16, l+24, all of lane l; blockQ8K.lqs
// holds the activation in the same order. VPMADDUBSW then sums pairs of one
// lane, and VPMADDWD with the sub-block scale (int16) sums two pairs and
// scales them, giving int32 lane l in dword l directly. Integer sums are
// exact in any order, and the float combination per super-block and vector
// is the generic one (VCVTDQ2PS, VMULPS by d, VADDPS into sums[l]; sumf -=
// dmin·sumi), so every vector's result is bit-identical to
// dotQ4KQ8KGeneric.

// q4kPerm gathers dwords 0,2,4,6 into the low half and 1,3,5,7 into the
// high half (VPERMD).
DATA q4kPerm<>+0(SB)/8, $0x0000000200000000
DATA q4kPerm<>+8(SB)/8, $0x0000000600000004
DATA q4kPerm<>+16(SB)/8, $0x0000000300000001
DATA q4kPerm<>+24(SB)/8, $0x0000000700000005
GLOBL q4kPerm<>(SB), RODATA|NOPTR, $32

// q4kTr is a 4×4 byte transpose per 128-bit half: dst[4l+t] = src[4t+l].
DATA q4kTr<>+0(SB)/8, $0x0d0905010c080400
DATA q4kTr<>+8(SB)/8, $0x0f0b07030e0a0602
DATA q4kTr<>+16(SB)/8, $0x0d0905010c080400
DATA q4kTr<>+24(SB)/8, $0x0f0b07030e0a0602
GLOBL q4kTr<>(SB), RODATA|NOPTR, $32

DATA q4kMask<>+0(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA q4kMask<>+8(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA q4kMask<>+16(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA q4kMask<>+24(SB)/8, $0x0f0f0f0f0f0f0f0f
GLOBL q4kMask<>(SB), RODATA|NOPTR, $32

// q4kSc<>+32j is the VPSHUFB control that widens scale byte j (of 8, in
// each 128-bit half) to sixteen int16 copies.
DATA q4kSc<>+0(SB)/8, $0x8000800080008000
DATA q4kSc<>+8(SB)/8, $0x8000800080008000
DATA q4kSc<>+16(SB)/8, $0x8000800080008000
DATA q4kSc<>+24(SB)/8, $0x8000800080008000
DATA q4kSc<>+32(SB)/8, $0x8001800180018001
DATA q4kSc<>+40(SB)/8, $0x8001800180018001
DATA q4kSc<>+48(SB)/8, $0x8001800180018001
DATA q4kSc<>+56(SB)/8, $0x8001800180018001
DATA q4kSc<>+64(SB)/8, $0x8002800280028002
DATA q4kSc<>+72(SB)/8, $0x8002800280028002
DATA q4kSc<>+80(SB)/8, $0x8002800280028002
DATA q4kSc<>+88(SB)/8, $0x8002800280028002
DATA q4kSc<>+96(SB)/8, $0x8003800380038003
DATA q4kSc<>+104(SB)/8, $0x8003800380038003
DATA q4kSc<>+112(SB)/8, $0x8003800380038003
DATA q4kSc<>+120(SB)/8, $0x8003800380038003
DATA q4kSc<>+128(SB)/8, $0x8004800480048004
DATA q4kSc<>+136(SB)/8, $0x8004800480048004
DATA q4kSc<>+144(SB)/8, $0x8004800480048004
DATA q4kSc<>+152(SB)/8, $0x8004800480048004
DATA q4kSc<>+160(SB)/8, $0x8005800580058005
DATA q4kSc<>+168(SB)/8, $0x8005800580058005
DATA q4kSc<>+176(SB)/8, $0x8005800580058005
DATA q4kSc<>+184(SB)/8, $0x8005800580058005
DATA q4kSc<>+192(SB)/8, $0x8006800680068006
DATA q4kSc<>+200(SB)/8, $0x8006800680068006
DATA q4kSc<>+208(SB)/8, $0x8006800680068006
DATA q4kSc<>+216(SB)/8, $0x8006800680068006
DATA q4kSc<>+224(SB)/8, $0x8007800780078007
DATA q4kSc<>+232(SB)/8, $0x8007800780078007
DATA q4kSc<>+240(SB)/8, $0x8007800780078007
DATA q4kSc<>+248(SB)/8, $0x8007800780078007
GLOBL q4kSc<>(SB), RODATA|NOPTR, $256

// func q4kRowsAVX2(w *byte, rowBytes, rows int, y *blockQ8K, nb, nv, ystride int, dst *float32, dstride int)
// For rows consecutive Q4_K rows (rowBytes apart, nb blocks each) and nv ≤ 8
// vectors (vector v's nb blocks start at y + v·ystride bytes), stores row
// r · vector v at dst[r + v·dstride]. Per row and vector the float lanes
// sums[0..7] and sumf accumulate on the stack and finish as sumf + sums[0]
// + ... + sums[7], the generic order.
// Frame: 0..255 the decoded, reordered nibbles of the 8 sub-blocks; 256..511
// the 8 sub-block scales broadcast as int16; 512..527 the 8 mins (int16);
// 528..815 the accumulators (9 float32 per vector). blockQ8K offsets: d 0,
// bsum2 548, lqs 608, size 864 (TestBlockQ8KLayout).
TEXT ·q4kRowsAVX2(SB), $832-72
	MOVQ w+0(FP), SI
	MOVQ ystride+48(FP), R15
	VMOVDQU q4kPerm<>(SB), Y12
	VMOVDQU q4kTr<>(SB), Y13
	VMOVDQU q4kMask<>(SB), Y14
	MOVQ rows+16(FP), AX
	TESTQ AX, AX
	JEQ q4rsdone
q4rsrow:
	MOVQ SI, 816(SP) // this row
	VPXOR Y0, Y0, Y0
	LEAQ 528(SP), R13
	MOVQ nv+40(FP), R14
q4rszero:
	VMOVDQU Y0, (R13)
	MOVL $0, 32(R13)
	ADDQ $36, R13
	DECQ R14
	JNZ q4rszero
	MOVQ y+24(FP), DI
	MOVQ nb+32(FP), R8
	TESTQ R8, R8
	JEQ q4rsfinish
q4rsblock:
	// scales s0,s1 and mins m0,m1 (ggml kmask shuffle)
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
	VPBROADCASTQ X8, Y8
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
	VMOVQ DX, X9
	VPMOVZXBW X9, X9
	VMOVDQU X9, 512(SP)
	VPSHUFB q4kSc<>+0(SB), Y8, Y9
	VMOVDQU Y9, 256(SP)
	VPSHUFB q4kSc<>+32(SB), Y8, Y9
	VMOVDQU Y9, 288(SP)
	VPSHUFB q4kSc<>+64(SB), Y8, Y9
	VMOVDQU Y9, 320(SP)
	VPSHUFB q4kSc<>+96(SB), Y8, Y9
	VMOVDQU Y9, 352(SP)
	VPSHUFB q4kSc<>+128(SB), Y8, Y9
	VMOVDQU Y9, 384(SP)
	VPSHUFB q4kSc<>+160(SB), Y8, Y9
	VMOVDQU Y9, 416(SP)
	VPSHUFB q4kSc<>+192(SB), Y8, Y9
	VMOVDQU Y9, 448(SP)
	VPSHUFB q4kSc<>+224(SB), Y8, Y9
	VMOVDQU Y9, 480(SP)
	VPERMD 16(SI), Y12, Y1
	VPSHUFB Y13, Y1, Y1
	VPAND Y14, Y1, Y2
	VPSRLW $4, Y1, Y3
	VPAND Y14, Y3, Y3
	VMOVDQU Y2, 0(SP)
	VMOVDQU Y3, 32(SP)
	VPERMD 48(SI), Y12, Y1
	VPSHUFB Y13, Y1, Y1
	VPAND Y14, Y1, Y2
	VPSRLW $4, Y1, Y3
	VPAND Y14, Y3, Y3
	VMOVDQU Y2, 64(SP)
	VMOVDQU Y3, 96(SP)
	VPERMD 80(SI), Y12, Y1
	VPSHUFB Y13, Y1, Y1
	VPAND Y14, Y1, Y2
	VPSRLW $4, Y1, Y3
	VPAND Y14, Y3, Y3
	VMOVDQU Y2, 128(SP)
	VMOVDQU Y3, 160(SP)
	VPERMD 112(SI), Y12, Y1
	VPSHUFB Y13, Y1, Y1
	VPAND Y14, Y1, Y2
	VPSRLW $4, Y1, Y3
	VPAND Y14, Y3, Y3
	VMOVDQU Y2, 192(SP)
	VMOVDQU Y3, 224(SP)
	// d and dmin of the weight block, as float32
	MOVWLZX 0(SI), CX
	VMOVD CX, X10
	VCVTPH2PS X10, X10
	MOVWLZX 2(SI), CX
	VMOVD CX, X11
	VCVTPH2PS X11, X11
	MOVQ DI, R12
	LEAQ 528(SP), R13
	MOVQ nv+40(FP), R14
q4rsvec:
	VMOVDQU 0(SP), Y1
	VPMADDUBSW 608(R12), Y1, Y1
	VPMADDWD 256(SP), Y1, Y1
	VMOVDQA Y1, Y0
	VMOVDQU 32(SP), Y5
	VPMADDUBSW 640(R12), Y5, Y5
	VPMADDWD 288(SP), Y5, Y5
	VMOVDQA Y5, Y4
	VMOVDQU 64(SP), Y1
	VPMADDUBSW 672(R12), Y1, Y1
	VPMADDWD 320(SP), Y1, Y1
	VPADDD Y1, Y0, Y0
	VMOVDQU 96(SP), Y5
	VPMADDUBSW 704(R12), Y5, Y5
	VPMADDWD 352(SP), Y5, Y5
	VPADDD Y5, Y4, Y4
	VMOVDQU 128(SP), Y1
	VPMADDUBSW 736(R12), Y1, Y1
	VPMADDWD 384(SP), Y1, Y1
	VPADDD Y1, Y0, Y0
	VMOVDQU 160(SP), Y5
	VPMADDUBSW 768(R12), Y5, Y5
	VPMADDWD 416(SP), Y5, Y5
	VPADDD Y5, Y4, Y4
	VMOVDQU 192(SP), Y1
	VPMADDUBSW 800(R12), Y1, Y1
	VPMADDWD 448(SP), Y1, Y1
	VPADDD Y1, Y0, Y0
	VMOVDQU 224(SP), Y5
	VPMADDUBSW 832(R12), Y5, Y5
	VPMADDWD 480(SP), Y5, Y5
	VPADDD Y5, Y4, Y4
	VPADDD Y4, Y0, Y0
	// mins: sumi = Σ bsum2[j]·m[j]
	VMOVDQU 512(SP), X2
	VPMADDWD 548(R12), X2, X2
	VPSHUFD $0x4e, X2, X3
	VPADDD X3, X2, X2
	VPSHUFD $0xb1, X2, X3
	VPADDD X3, X2, X2
	VMOVD X2, AX
	// sums += (d·y.d)·lanes ; sumf -= (dmin·y.d)·sumi
	VMOVSS 0(R12), X3
	VMULSS X3, X10, X4
	VCVTDQ2PS Y0, Y0
	VBROADCASTSS X4, Y4
	VMULPS Y4, Y0, Y0
	VADDPS (R13), Y0, Y0
	VMOVUPS Y0, (R13)
	VMULSS X3, X11, X5
	VCVTSI2SSL AX, X6, X6
	VMULSS X6, X5, X5
	VMOVSS 32(R13), X7
	VSUBSS X5, X7, X7
	VMOVSS X7, 32(R13)
	ADDQ R15, R12
	ADDQ $36, R13
	DECQ R14
	JNZ q4rsvec
	ADDQ $144, SI
	ADDQ $864, DI
	DECQ R8
	JNZ q4rsblock
q4rsfinish:
	// dst[v·dstride] = sumf + sums[0] + ... + sums[7]
	LEAQ 528(SP), R13
	MOVQ dst+56(FP), R12
	MOVQ dstride+64(FP), R9
	SHLQ $2, R9
	MOVQ nv+40(FP), R14
q4rsout:
	VMOVSS 32(R13), X0
	VADDSS 0(R13), X0, X0
	VADDSS 4(R13), X0, X0
	VADDSS 8(R13), X0, X0
	VADDSS 12(R13), X0, X0
	VADDSS 16(R13), X0, X0
	VADDSS 20(R13), X0, X0
	VADDSS 24(R13), X0, X0
	VADDSS 28(R13), X0, X0
	VMOVSS X0, (R12)
	ADDQ $36, R13
	ADDQ R9, R12
	DECQ R14
	JNZ q4rsout
	ADDQ $4, dst+56(FP)
	MOVQ 816(SP), SI
	ADDQ rowBytes+8(FP), SI
	DECQ rows+16(FP)
	JNZ q4rsrow
q4rsdone:
	VZEROUPPER
	RET

// func q4kRow1AVX2(w *byte, y *blockQ8K, nb int) float32
// The single-vector form of q4kRowsAVX2 (decode): the same lane-grouped
// integer lanes with the weights, scales and accumulators in registers, and
// the generic float combination (as q4kRowAVX2), so it equals
// dotQ4KQ8KGeneric bit for bit.
TEXT ·q4kRow1AVX2(SB), NOSPLIT, $32-28
	MOVQ w+0(FP), SI
	MOVQ y+8(FP), DI
	MOVQ nb+16(FP), R8
	VMOVDQU q4kPerm<>(SB), Y12
	VMOVDQU q4kTr<>(SB), Y13
	VMOVDQU q4kMask<>(SB), Y14
	VXORPS Y15, Y15, Y15 // sums
	VXORPS X11, X11, X11 // sumf
	TESTQ R8, R8
	JEQ q4r1done
q4r1loop:
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
	VPBROADCASTQ X8, Y8
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
	VMOVQ DX, X9
	VPMOVZXBW X9, X9
	VPMADDWD 548(DI), X9, X9
	VPSHUFD $0x4e, X9, X10
	VPADDD X10, X9, X9
	VPSHUFD $0xb1, X9, X10
	VPADDD X10, X9, X9
	VMOVD X9, AX // sumi
	VPERMD 16(SI), Y12, Y1
	VPSHUFB Y13, Y1, Y1
	VPAND Y14, Y1, Y2
	VPSRLW $4, Y1, Y3
	VPAND Y14, Y3, Y3
	VPMADDUBSW 608(DI), Y2, Y2
	VPMADDUBSW 640(DI), Y3, Y3
	VPSHUFB q4kSc<>+0(SB), Y8, Y6
	VPSHUFB q4kSc<>+32(SB), Y8, Y7
	VPMADDWD Y6, Y2, Y2
	VPMADDWD Y7, Y3, Y3
	VPADDD Y3, Y2, Y0
	VPERMD 48(SI), Y12, Y1
	VPSHUFB Y13, Y1, Y1
	VPAND Y14, Y1, Y2
	VPSRLW $4, Y1, Y3
	VPAND Y14, Y3, Y3
	VPMADDUBSW 672(DI), Y2, Y2
	VPMADDUBSW 704(DI), Y3, Y3
	VPSHUFB q4kSc<>+64(SB), Y8, Y6
	VPSHUFB q4kSc<>+96(SB), Y8, Y7
	VPMADDWD Y6, Y2, Y2
	VPMADDWD Y7, Y3, Y3
	VPADDD Y2, Y0, Y0
	VPADDD Y3, Y0, Y0
	VPERMD 80(SI), Y12, Y1
	VPSHUFB Y13, Y1, Y1
	VPAND Y14, Y1, Y2
	VPSRLW $4, Y1, Y3
	VPAND Y14, Y3, Y3
	VPMADDUBSW 736(DI), Y2, Y2
	VPMADDUBSW 768(DI), Y3, Y3
	VPSHUFB q4kSc<>+128(SB), Y8, Y6
	VPSHUFB q4kSc<>+160(SB), Y8, Y7
	VPMADDWD Y6, Y2, Y2
	VPMADDWD Y7, Y3, Y3
	VPADDD Y2, Y0, Y0
	VPADDD Y3, Y0, Y0
	VPERMD 112(SI), Y12, Y1
	VPSHUFB Y13, Y1, Y1
	VPAND Y14, Y1, Y2
	VPSRLW $4, Y1, Y3
	VPAND Y14, Y3, Y3
	VPMADDUBSW 800(DI), Y2, Y2
	VPMADDUBSW 832(DI), Y3, Y3
	VPSHUFB q4kSc<>+192(SB), Y8, Y6
	VPSHUFB q4kSc<>+224(SB), Y8, Y7
	VPMADDWD Y6, Y2, Y2
	VPMADDWD Y7, Y3, Y3
	VPADDD Y2, Y0, Y0
	VPADDD Y3, Y0, Y0
	MOVWLZX 0(SI), CX
	VMOVD CX, X10
	VCVTPH2PS X10, X10
	VMULSS 0(DI), X10, X10
	VCVTDQ2PS Y0, Y0
	VBROADCASTSS X10, Y10
	VMULPS Y10, Y0, Y0
	VADDPS Y0, Y15, Y15
	MOVWLZX 2(SI), CX
	VMOVD CX, X9
	VCVTPH2PS X9, X9
	VMULSS 0(DI), X9, X9
	VCVTSI2SSL AX, X10, X10
	VMULSS X10, X9, X9
	VSUBSS X9, X11, X11
	ADDQ $144, SI
	ADDQ $864, DI
	DECQ R8
	JNZ q4r1loop
q4r1done:
	VMOVUPS Y15, 0(SP)
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
