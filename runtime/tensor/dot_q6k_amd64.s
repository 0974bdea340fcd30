//go:build amd64 && !purego

#include "textflag.h"

// Batched Q6_K × Q8_K rows (q6kRowsAVX2), on the lane-grouped scheme of
// q4kRowsAVX2: per super-block the 6-bit values are assembled once, in the
// order of blockQ8K.lqs (bytes 4l..4l+3 of each 32-value sub-block hold
// elements l, l+8, l+16, l+24, all of mod-8 lane l): ql and qh are permuted
// with the same VPERMD + 4×4 byte transpose before the nibbles and the two
// high bits are combined, since each value's ql and qh bits sit at the same
// byte index. Bytes 4l,4l+1 (elements l, l+8) share the scale of the first
// 16 values of the sub-block and bytes 4l+2,4l+3 that of the second, so per
// vector VPMADDUBSW (unsigned q ≤ 63 × int8) gives the pair sums, a second
// VPMADDUBSW with 32s gives 32·(pair sums of the activation) (ggml's q-32
// offset, subtracted in int16: |diff| ≤ 24130), and VPMADDWD with the
// scale pair (s[2g], s[2g+1]) as int16 sums the two pairs and scales them:
// dword l is ggml-generic's int32 lane l for this sub-block. Integer sums
// are exact in any order; the float combination per super-block and vector
// is dotQ6KQ8KGeneric's (sums[l] += (d·y.d)·lane, then 0 + sums[0] + ... +
// sums[7]), so the result is bit-identical to it.

// q6kPerm, q6kTr: the VPERMD and byte transpose of q4kRowsAVX2
// (dot_q4k_amd64.s) that put natural order into lane-grouped order.
DATA q6kPerm<>+0(SB)/8, $0x0000000200000000
DATA q6kPerm<>+8(SB)/8, $0x0000000600000004
DATA q6kPerm<>+16(SB)/8, $0x0000000300000001
DATA q6kPerm<>+24(SB)/8, $0x0000000700000005
GLOBL q6kPerm<>(SB), RODATA|NOPTR, $32

DATA q6kTr<>+0(SB)/8, $0x0d0905010c080400
DATA q6kTr<>+8(SB)/8, $0x0f0b07030e0a0602
DATA q6kTr<>+16(SB)/8, $0x0d0905010c080400
DATA q6kTr<>+24(SB)/8, $0x0f0b07030e0a0602
GLOBL q6kTr<>(SB), RODATA|NOPTR, $32

DATA q6kM0F<>+0(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA q6kM0F<>+8(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA q6kM0F<>+16(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA q6kM0F<>+24(SB)/8, $0x0f0f0f0f0f0f0f0f
GLOBL q6kM0F<>(SB), RODATA|NOPTR, $32

DATA q6k32<>+0(SB)/8, $0x2020202020202020
DATA q6k32<>+8(SB)/8, $0x2020202020202020
DATA q6k32<>+16(SB)/8, $0x2020202020202020
DATA q6k32<>+24(SB)/8, $0x2020202020202020
GLOBL q6k32<>(SB), RODATA|NOPTR, $32

DATA q6kM30<>+0(SB)/8, $0x3030303030303030
DATA q6kM30<>+8(SB)/8, $0x3030303030303030
DATA q6kM30<>+16(SB)/8, $0x3030303030303030
DATA q6kM30<>+24(SB)/8, $0x3030303030303030
GLOBL q6kM30<>(SB), RODATA|NOPTR, $32

// Q6HALF(QL, QH, OFF): the four sub-blocks of one 128-value half (ql at
// QL(SI), QL+32(SI); qh at QH(SI)) into the frame at OFF..OFF+127.
#define Q6HALF(QL, QH, OFF) \
	VPERMD QL(SI), Y12, Y1 \
	VPSHUFB Y13, Y1, Y1 \
	VPERMD (QL+32)(SI), Y12, Y2 \
	VPSHUFB Y13, Y2, Y2 \
	VPERMD QH(SI), Y12, Y3 \
	VPSHUFB Y13, Y3, Y3 \
	VPAND Y14, Y1, Y4 \
	VPSLLW $4, Y3, Y5 \
	VPAND Y11, Y5, Y5 \
	VPOR Y5, Y4, Y4 \
	VMOVDQU Y4, OFF(SP) \
	VPAND Y14, Y2, Y4 \
	VPSLLW $2, Y3, Y5 \
	VPAND Y11, Y5, Y5 \
	VPOR Y5, Y4, Y4 \
	VMOVDQU Y4, (OFF+32)(SP) \
	VPSRLW $4, Y1, Y4 \
	VPAND Y14, Y4, Y4 \
	VPAND Y11, Y3, Y5 \
	VPOR Y5, Y4, Y4 \
	VMOVDQU Y4, (OFF+64)(SP) \
	VPSRLW $4, Y2, Y4 \
	VPAND Y14, Y4, Y4 \
	VPSRLW $2, Y3, Y5 \
	VPAND Y11, Y5, Y5 \
	VPOR Y5, Y4, Y4 \
	VMOVDQU Y4, (OFF+96)(SP)

// Q6SUB(G, ACC): sub-block G's lanes for the vector at R12 added to ACC.
#define Q6SUB(G, ACC) \
	VMOVDQU (32*G)(SP), Y1 \
	VPMADDUBSW (608+32*G)(R12), Y1, Y1 \
	VPMADDUBSW (608+32*G)(R12), Y9, Y2 \
	VPSUBW Y2, Y1, Y1 \
	VPMADDWD (256+32*G)(SP), Y1, Y1 \
	VPADDD Y1, ACC, ACC

// func q6kRowsAVX2(w *byte, rowBytes, rows int, y *blockQ8K, nb, nv, ystride int, dst *float32, dstride int)
// For rows consecutive Q6_K rows (rowBytes apart, nb blocks each) and nv ≤ 8
// vectors (vector v's nb blocks at y + v·ystride bytes), stores row r ·
// vector v at dst[r + v·dstride].
// Frame: 0..255 the assembled 6-bit values of the 8 sub-blocks; 256..511
// the 8 scale pairs broadcast; 512..767 sums[0..7] per vector; 768..799 the
// 16 scales as int16; 800 the row pointer. blockQ8K offsets: d 0, lqs 608,
// size 864 (TestBlockQ8KLayout).
TEXT ·q6kRowsAVX2(SB), $816-72
	MOVQ w+0(FP), SI
	MOVQ ystride+48(FP), R15
	VMOVDQU q6kPerm<>(SB), Y12
	VMOVDQU q6kTr<>(SB), Y13
	VMOVDQU q6kM0F<>(SB), Y14
	VMOVDQU q6kM30<>(SB), Y11
	VMOVDQU q6k32<>(SB), Y9
	MOVQ rows+16(FP), AX
	TESTQ AX, AX
	JEQ q6rsdone
q6rsrow:
	MOVQ SI, 800(SP)
	VPXOR Y0, Y0, Y0
	LEAQ 512(SP), R13
	MOVQ nv+40(FP), R14
q6rszero:
	VMOVDQU Y0, (R13)
	ADDQ $32, R13
	DECQ R14
	JNZ q6rszero
	MOVQ y+24(FP), DI
	MOVQ nb+32(FP), R8
	TESTQ R8, R8
	JEQ q6rsfinish
q6rsblock:
	VPMOVSXBW 192(SI), Y0
	VMOVDQU Y0, 768(SP)
	VPBROADCASTD 768(SP), Y0
	VMOVDQU Y0, 256(SP)
	VPBROADCASTD 772(SP), Y0
	VMOVDQU Y0, 288(SP)
	VPBROADCASTD 776(SP), Y0
	VMOVDQU Y0, 320(SP)
	VPBROADCASTD 780(SP), Y0
	VMOVDQU Y0, 352(SP)
	VPBROADCASTD 784(SP), Y0
	VMOVDQU Y0, 384(SP)
	VPBROADCASTD 788(SP), Y0
	VMOVDQU Y0, 416(SP)
	VPBROADCASTD 792(SP), Y0
	VMOVDQU Y0, 448(SP)
	VPBROADCASTD 796(SP), Y0
	VMOVDQU Y0, 480(SP)
	Q6HALF(0, 128, 0)
	Q6HALF(64, 160, 128)
	MOVWLZX 208(SI), CX
	VMOVD CX, X10
	VCVTPH2PS X10, X10
	MOVQ DI, R12
	LEAQ 512(SP), R13
	MOVQ nv+40(FP), R14
q6rsvec:
	VPXOR Y0, Y0, Y0
	VPXOR Y6, Y6, Y6
	Q6SUB(0, Y0)
	Q6SUB(1, Y6)
	Q6SUB(2, Y0)
	Q6SUB(3, Y6)
	Q6SUB(4, Y0)
	Q6SUB(5, Y6)
	Q6SUB(6, Y0)
	Q6SUB(7, Y6)
	VPADDD Y6, Y0, Y0
	// sums += (d·y.d)·lanes
	VMULSS 0(R12), X10, X4
	VCVTDQ2PS Y0, Y0
	VBROADCASTSS X4, Y4
	VMULPS Y4, Y0, Y0
	VADDPS (R13), Y0, Y0
	VMOVUPS Y0, (R13)
	ADDQ R15, R12
	ADDQ $32, R13
	DECQ R14
	JNZ q6rsvec
	ADDQ $210, SI
	ADDQ $864, DI
	DECQ R8
	JNZ q6rsblock
q6rsfinish:
	// dst[v·dstride] = 0 + sums[0] + ... + sums[7]
	LEAQ 512(SP), R13
	MOVQ dst+56(FP), R12
	MOVQ dstride+64(FP), R9
	SHLQ $2, R9
	MOVQ nv+40(FP), R14
q6rsout:
	VXORPS X0, X0, X0
	VADDSS 0(R13), X0, X0
	VADDSS 4(R13), X0, X0
	VADDSS 8(R13), X0, X0
	VADDSS 12(R13), X0, X0
	VADDSS 16(R13), X0, X0
	VADDSS 20(R13), X0, X0
	VADDSS 24(R13), X0, X0
	VADDSS 28(R13), X0, X0
	VMOVSS X0, (R12)
	ADDQ $32, R13
	ADDQ R9, R12
	DECQ R14
	JNZ q6rsout
	ADDQ $4, dst+56(FP)
	MOVQ 800(SP), SI
	ADDQ rowBytes+8(FP), SI
	DECQ rows+16(FP)
	JNZ q6rsrow
q6rsdone:
	VZEROUPPER
	RET

// Q6R(W, G, ACC): the lanes of sub-block G (its values in W) for the
// vector at DI, scale pair from the frame, added to ACC. Clobbers W, Y5.
#define Q6R(W, G, ACC) \
	VPMADDUBSW (608+32*G)(DI), W, W \
	VPMADDUBSW (608+32*G)(DI), Y9, Y5 \
	VPSUBW Y5, W, W \
	VPBROADCASTD (4*G)(SP), Y5 \
	VPMADDWD Y5, W, W \
	VPADDD W, ACC, ACC

// Q6HALFR(QL, QH, G0, G1, G2, G3): Q6HALF in registers, sub-blocks G0..G3
// into Y0/Y6.
#define Q6HALFR(QL, QH, G0, G1, G2, G3) \
	VPERMD QL(SI), Y12, Y1 \
	VPSHUFB Y13, Y1, Y1 \
	VPERMD (QL+32)(SI), Y12, Y2 \
	VPSHUFB Y13, Y2, Y2 \
	VPERMD QH(SI), Y12, Y3 \
	VPSHUFB Y13, Y3, Y3 \
	VPAND Y14, Y1, Y4 \
	VPSLLW $4, Y3, Y5 \
	VPAND Y11, Y5, Y5 \
	VPOR Y5, Y4, Y4 \
	Q6R(Y4, G0, Y0) \
	VPAND Y14, Y2, Y7 \
	VPSLLW $2, Y3, Y5 \
	VPAND Y11, Y5, Y5 \
	VPOR Y5, Y7, Y7 \
	Q6R(Y7, G1, Y6) \
	VPSRLW $4, Y1, Y4 \
	VPAND Y14, Y4, Y4 \
	VPAND Y11, Y3, Y5 \
	VPOR Y5, Y4, Y4 \
	Q6R(Y4, G2, Y0) \
	VPSRLW $4, Y2, Y7 \
	VPAND Y14, Y7, Y7 \
	VPSRLW $2, Y3, Y5 \
	VPAND Y11, Y5, Y5 \
	VPOR Y5, Y7, Y7 \
	Q6R(Y7, G3, Y6)

// func q6kRow1AVX2(w *byte, y *blockQ8K, nb int) float32
// The single-vector form of q6kRowsAVX2 (decode), weights and accumulators
// in registers; identical to dotQ6KQ8KGeneric.
TEXT ·q6kRow1AVX2(SB), NOSPLIT, $32-28
	MOVQ w+0(FP), SI
	MOVQ y+8(FP), DI
	MOVQ nb+16(FP), R8
	VMOVDQU q6kPerm<>(SB), Y12
	VMOVDQU q6kTr<>(SB), Y13
	VMOVDQU q6kM0F<>(SB), Y14
	VMOVDQU q6kM30<>(SB), Y11
	VMOVDQU q6k32<>(SB), Y9
	VXORPS Y15, Y15, Y15 // sums
	TESTQ R8, R8
	JEQ q6r1done
q6r1loop:
	VPMOVSXBW 192(SI), Y0
	VMOVDQU Y0, 0(SP)
	VPXOR Y0, Y0, Y0
	VPXOR Y6, Y6, Y6
	Q6HALFR(0, 128, 0, 1, 2, 3)
	Q6HALFR(64, 160, 4, 5, 6, 7)
	VPADDD Y6, Y0, Y0
	MOVWLZX 208(SI), CX
	VMOVD CX, X10
	VCVTPH2PS X10, X10
	VMULSS 0(DI), X10, X10
	VCVTDQ2PS Y0, Y0
	VBROADCASTSS X10, Y10
	VMULPS Y10, Y0, Y0
	VADDPS Y0, Y15, Y15
	ADDQ $210, SI
	ADDQ $864, DI
	DECQ R8
	JNZ q6r1loop
q6r1done:
	VMOVUPS Y15, 0(SP)
	VXORPS X0, X0, X0
	VADDSS 0(SP), X0, X0
	VADDSS 4(SP), X0, X0
	VADDSS 8(SP), X0, X0
	VADDSS 12(SP), X0, X0
	VADDSS 16(SP), X0, X0
	VADDSS 20(SP), X0, X0
	VADDSS 24(SP), X0, X0
	VADDSS 28(SP), X0, X0
	VZEROUPPER
	MOVSS X0, ret+24(FP)
	RET

// func q6kVecs1AVX2(w *byte, rows int, y *blockQ8K, nb int, dst *float32)
// q6kRow1AVX2 over rows consecutive rows (nb super-blocks each) in one
// call, the weights prefetched 4 KiB ahead (decode streams them from DRAM)
// and the final fold from the register; identical to dotQ6KQ8KGeneric.
TEXT ·q6kVecs1AVX2(SB), NOSPLIT, $32-40
	MOVQ w+0(FP), SI
	MOVQ dst+32(FP), DX
	MOVQ rows+8(FP), BX
	VMOVDQU q6kPerm<>(SB), Y12
	VMOVDQU q6kTr<>(SB), Y13
	VMOVDQU q6kM0F<>(SB), Y14
	VMOVDQU q6kM30<>(SB), Y11
	VMOVDQU q6k32<>(SB), Y9
	TESTQ BX, BX
	JEQ q6v1done
q6v1row:
	MOVQ y+16(FP), DI
	MOVQ nb+24(FP), R8
	VXORPS Y15, Y15, Y15 // sums
	TESTQ R8, R8
	JEQ q6v1fold
q6v1loop:
	PREFETCHT0 4096(SI)
	PREFETCHT0 4160(SI)
	PREFETCHT0 4224(SI)
	PREFETCHT0 4288(SI)
	VPMOVSXBW 192(SI), Y0
	VMOVDQU Y0, 0(SP)
	VPXOR Y0, Y0, Y0
	VPXOR Y6, Y6, Y6
	Q6HALFR(0, 128, 0, 1, 2, 3)
	Q6HALFR(64, 160, 4, 5, 6, 7)
	VPADDD Y6, Y0, Y0
	MOVWLZX 208(SI), CX
	VMOVD CX, X10
	VCVTPH2PS X10, X10
	VMULSS 0(DI), X10, X10
	VCVTDQ2PS Y0, Y0
	VBROADCASTSS X10, Y10
	VMULPS Y10, Y0, Y0
	VADDPS Y0, Y15, Y15
	ADDQ $210, SI
	ADDQ $864, DI
	DECQ R8
	JNZ q6v1loop
q6v1fold:
	// 0 + sums[0] + ... + sums[7], the lanes taken out in order
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
	VMOVSS X0, (DX)
	ADDQ $4, DX
	DECQ BX
	JNZ q6v1row
q6v1done:
	VZEROUPPER
	RET
