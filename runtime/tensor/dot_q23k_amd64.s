//go:build amd64 && !purego

#include "textflag.h"

// Decode (single-vector) Q2_K and Q3_K × Q8_K rows, bit-identical to
// dotQ2KQ8KGeneric and dotQ3KQ8KGeneric (TestFastMatchesGeneric,
// FuzzDecodeKernels).
//
// Q2_K: ggml-generic's integer sum per super-block is one int32, isum =
// Σ_j scale_j·Σ q2·q8 over the 16 sub-blocks of 16, and summs = Σ_j
// bsums_j·min_j; both are exact in any order. Each 32-byte load of qs holds
// the 2-bit values of four 32-value groups (shifts 0, 2, 4, 6), in natural
// order, so VPMADDUBSW against blockQ8K.qs gives pair sums whose low 128-bit
// half belongs to sub-block 2G and high half to 2G+1; VPMADDWD with those
// two scales (VPSHUFB of the scale bytes, int16) scales and sums them. The
// mins term is one VPMADDWD of bsums with the high nibbles. The float step
// is the generic one: sumf += (y.d·d)·isum − (y.d·dmin)·summs per block.
//
// Q3_K: the generic kernel keeps eight int32 lanes (lane = element index
// mod 8) and sums[l] += (d·y.d)·lane per block, like Q6_K, so it uses Q6_K's
// lane-grouped scheme (dot_q6k_amd64.s): the low bits (qs) and the high-bit
// mask (hmask) are permuted with VPERMD + a 4×4 byte transpose into the
// order of blockQ8K.lqs, since each value's two parts sit at the same byte
// index. u = low | high<<2 is 0..7, the value is u − 4, so VPMADDUBSW(u, q8)
// − VPMADDUBSW(4, q8) gives the pair sums of one lane (|.| ≤ 1024), and
// VPMADDWD with the sub-block's scale pair (s[2G]−32, s[2G+1]−32) gives int32
// lane l in dword l. The 6-bit scales are unpacked with ggml's kmask steps
// in general registers.

DATA q2kSh<>+0(SB)/8, $0x8000800080008000
DATA q2kSh<>+8(SB)/8, $0x8000800080008000
DATA q2kSh<>+16(SB)/8, $0x8001800180018001
DATA q2kSh<>+24(SB)/8, $0x8001800180018001
DATA q2kSh<>+32(SB)/8, $0x8002800280028002
DATA q2kSh<>+40(SB)/8, $0x8002800280028002
DATA q2kSh<>+48(SB)/8, $0x8003800380038003
DATA q2kSh<>+56(SB)/8, $0x8003800380038003
DATA q2kSh<>+64(SB)/8, $0x8004800480048004
DATA q2kSh<>+72(SB)/8, $0x8004800480048004
DATA q2kSh<>+80(SB)/8, $0x8005800580058005
DATA q2kSh<>+88(SB)/8, $0x8005800580058005
DATA q2kSh<>+96(SB)/8, $0x8006800680068006
DATA q2kSh<>+104(SB)/8, $0x8006800680068006
DATA q2kSh<>+112(SB)/8, $0x8007800780078007
DATA q2kSh<>+120(SB)/8, $0x8007800780078007
DATA q2kSh<>+128(SB)/8, $0x8008800880088008
DATA q2kSh<>+136(SB)/8, $0x8008800880088008
DATA q2kSh<>+144(SB)/8, $0x8009800980098009
DATA q2kSh<>+152(SB)/8, $0x8009800980098009
DATA q2kSh<>+160(SB)/8, $0x800a800a800a800a
DATA q2kSh<>+168(SB)/8, $0x800a800a800a800a
DATA q2kSh<>+176(SB)/8, $0x800b800b800b800b
DATA q2kSh<>+184(SB)/8, $0x800b800b800b800b
DATA q2kSh<>+192(SB)/8, $0x800c800c800c800c
DATA q2kSh<>+200(SB)/8, $0x800c800c800c800c
DATA q2kSh<>+208(SB)/8, $0x800d800d800d800d
DATA q2kSh<>+216(SB)/8, $0x800d800d800d800d
DATA q2kSh<>+224(SB)/8, $0x800e800e800e800e
DATA q2kSh<>+232(SB)/8, $0x800e800e800e800e
DATA q2kSh<>+240(SB)/8, $0x800f800f800f800f
DATA q2kSh<>+248(SB)/8, $0x800f800f800f800f
GLOBL q2kSh<>(SB), RODATA|NOPTR, $256

DATA q2kM03<>+0(SB)/8, $0x0303030303030303
DATA q2kM03<>+8(SB)/8, $0x0303030303030303
DATA q2kM03<>+16(SB)/8, $0x0303030303030303
DATA q2kM03<>+24(SB)/8, $0x0303030303030303
GLOBL q2kM03<>(SB), RODATA|NOPTR, $32

DATA q2kM0F<>+0(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA q2kM0F<>+8(SB)/8, $0x0f0f0f0f0f0f0f0f
GLOBL q2kM0F<>(SB), RODATA|NOPTR, $16

DATA q3kM04<>+0(SB)/8, $0x0404040404040404
DATA q3kM04<>+8(SB)/8, $0x0404040404040404
DATA q3kM04<>+16(SB)/8, $0x0404040404040404
DATA q3kM04<>+24(SB)/8, $0x0404040404040404
GLOBL q3kM04<>(SB), RODATA|NOPTR, $32

DATA q3k32w<>+0(SB)/8, $0x0020002000200020
DATA q3k32w<>+8(SB)/8, $0x0020002000200020
DATA q3k32w<>+16(SB)/8, $0x0020002000200020
DATA q3k32w<>+24(SB)/8, $0x0020002000200020
GLOBL q3k32w<>(SB), RODATA|NOPTR, $32

// q3kPerm, q3kTr: the VPERMD and byte transpose of q4kRowsAVX2
// (dot_q4k_amd64.s) that put natural order into lane-grouped order.
DATA q3kPerm<>+0(SB)/8, $0x0000000200000000
DATA q3kPerm<>+8(SB)/8, $0x0000000600000004
DATA q3kPerm<>+16(SB)/8, $0x0000000300000001
DATA q3kPerm<>+24(SB)/8, $0x0000000700000005
GLOBL q3kPerm<>(SB), RODATA|NOPTR, $32

DATA q3kTr<>+0(SB)/8, $0x0d0905010c080400
DATA q3kTr<>+8(SB)/8, $0x0f0b07030e0a0602
DATA q3kTr<>+16(SB)/8, $0x0d0905010c080400
DATA q3kTr<>+24(SB)/8, $0x0f0b07030e0a0602
GLOBL q3kTr<>(SB), RODATA|NOPTR, $32

// Q2G(SH, QOFF, G, ACC): group G (shift SH of the 32 qs bytes in Y1, the
// activation at qs offset QOFF) scaled and added to ACC. Clobbers Y2, Y3.
#define Q2G(SH, QOFF, G, ACC) \
	VPSRLW $SH, Y1, Y2 \
	VPAND Y14, Y2, Y2 \
	VPMADDUBSW QOFF(DI), Y2, Y2 \
	VPSHUFB (32*G)(R10), Y13, Y3 \
	VPMADDWD Y3, Y2, Y2 \
	VPADDD Y2, ACC, ACC

// func q2kVecs1AVX2(w *byte, rows int, y *blockQ8K, nb int, dst *float32)
// For rows consecutive Q2_K rows of nb super-blocks, dst[r] = row r · y,
// the weights prefetched 4 KiB ahead (decode streams them from DRAM).
// blockQ8K offsets: d 0, qs 4, bsums 260, size 864 (TestBlockQ8KLayout).
TEXT ·q2kVecs1AVX2(SB), NOSPLIT, $0-40
	MOVQ w+0(FP), SI
	MOVQ dst+32(FP), DX
	MOVQ rows+8(FP), BX
	LEAQ q2kSh<>(SB), R10
	VMOVDQU q2kM03<>(SB), Y14
	VMOVDQU q2kM0F<>(SB), X15
	TESTQ BX, BX
	JEQ q2v1done
q2v1row:
	MOVQ y+16(FP), DI
	MOVQ nb+24(FP), R8
	VXORPS X12, X12, X12 // sumf
	TESTQ R8, R8
	JEQ q2v1store
q2v1loop:
	PREFETCHT0 4096(SI)
	PREFETCHT0 4160(SI)
	VMOVDQU 0(SI), X0
	VPAND X15, X0, X1    // scales
	VPSRLW $4, X0, X0
	VPAND X15, X0, X0    // mins
	VPMOVZXBW X0, Y0
	VPMADDWD 260(DI), Y0, Y11 // bsums·mins, 8 dwords
	VINSERTI128 $1, X1, Y1, Y13
	VMOVDQU 16(SI), Y1
	VPAND Y14, Y1, Y2
	VPMADDUBSW 4(DI), Y2, Y2
	VPSHUFB 0(R10), Y13, Y3
	VPMADDWD Y3, Y2, Y10
	Q2G(2, 36, 1, Y10)
	Q2G(4, 68, 2, Y10)
	Q2G(6, 100, 3, Y10)
	VMOVDQU 48(SI), Y1
	VPAND Y14, Y1, Y2
	VPMADDUBSW 132(DI), Y2, Y2
	VPSHUFB 128(R10), Y13, Y3
	VPMADDWD Y3, Y2, Y9
	Q2G(2, 164, 5, Y9)
	Q2G(4, 196, 6, Y9)
	Q2G(6, 228, 7, Y9)
	VPADDD Y9, Y10, Y10
	// [isum, summs] = horizontal sums of Y10 and Y11
	VPHADDD Y11, Y10, Y10
	VEXTRACTI128 $1, Y10, X9
	VPADDD X9, X10, X10
	VPHADDD X10, X10, X10
	VCVTDQ2PS X10, X10
	// [y.d·d, y.d·dmin]·[isum, summs]; sumf += p0 − p1
	MOVL 80(SI), CX
	VMOVD CX, X9
	VCVTPH2PS X9, X9
	VBROADCASTSS 0(DI), X8
	VMULPS X8, X9, X9
	VMULPS X10, X9, X9
	VMOVSHDUP X9, X8
	VSUBSS X8, X9, X9
	VADDSS X9, X12, X12
	ADDQ $84, SI
	ADDQ $864, DI
	DECQ R8
	JNZ q2v1loop
q2v1store:
	VMOVSS X12, (DX)
	ADDQ $4, DX
	DECQ BX
	JNZ q2v1row
q2v1done:
	VZEROUPPER
	RET

// Q3G(LOSH, HOP, HSH, G, ACC): sub-block G = 4h+k (low bits at shift LOSH
// = 2k of Y1, the high bit G of Y3 moved to bit 2 by HOP $HSH) for the
// vector at DI, scale pair from the frame, added to ACC. Clobbers Y4, Y5.
#define Q3G(LOSH, HOP, HSH, G, ACC) \
	VPSRLW $LOSH, Y1, Y4 \
	VPAND Y14, Y4, Y4 \
	HOP $HSH, Y3, Y5 \
	VPAND Y11, Y5, Y5 \
	VPOR Y5, Y4, Y4 \
	VPMADDUBSW (608+32*G)(DI), Y4, Y4 \
	VPMADDUBSW (608+32*G)(DI), Y11, Y5 \
	VPSUBW Y5, Y4, Y4 \
	VPBROADCASTD (4*G)(SP), Y5 \
	VPMADDWD Y5, Y4, Y4 \
	VPADDD Y4, ACC, ACC

// func q3kVecs1AVX2(w *byte, rows int, y *blockQ8K, nb int, dst *float32)
// For rows consecutive Q3_K rows of nb super-blocks, dst[r] = row r · y
// (lanes from blockQ8K.lqs at 608), weights prefetched 4 KiB ahead.
// Frame: 0..31 the 16 scales − 32 as int16.
TEXT ·q3kVecs1AVX2(SB), NOSPLIT, $32-40
	MOVQ w+0(FP), SI
	MOVQ dst+32(FP), DX
	MOVQ rows+8(FP), BX
	VMOVDQU q3kPerm<>(SB), Y12
	VMOVDQU q3kTr<>(SB), Y13
	VMOVDQU q2kM03<>(SB), Y14
	VMOVDQU q3kM04<>(SB), Y11
	TESTQ BX, BX
	JEQ q3v1done
q3v1row:
	MOVQ y+16(FP), DI
	MOVQ nb+24(FP), R8
	VXORPS Y15, Y15, Y15 // sums
	TESTQ R8, R8
	JEQ q3v1fold
q3v1loop:
	PREFETCHT0 4096(SI)
	PREFETCHT0 4160(SI)
	// scales (q3KScales): aux0 = a0&m2 | (t&m1)<<4, aux1 = a1&m2 |
	// (t>>2&m1)<<4, aux2 = a0>>4&m2 | (t>>4&m1)<<4, aux3 = a1>>4&m2 | (t>>6&m1)<<4
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
	VPSUBW q3k32w<>(SB), Y0, Y0
	VMOVDQU Y0, 0(SP)
	VPERMD 0(SI), Y12, Y3
	VPSHUFB Y13, Y3, Y3  // hmask, lane-grouped
	VPERMD 32(SI), Y12, Y1
	VPSHUFB Y13, Y1, Y1  // low bits of the first half
	VPXOR Y0, Y0, Y0
	VPXOR Y6, Y6, Y6
	Q3G(0, VPSLLW, 2, 0, Y0)
	Q3G(2, VPSLLW, 1, 1, Y6)
	Q3G(4, VPSRLW, 0, 2, Y0)
	Q3G(6, VPSRLW, 1, 3, Y6)
	VPERMD 64(SI), Y12, Y1
	VPSHUFB Y13, Y1, Y1
	Q3G(0, VPSRLW, 2, 4, Y0)
	Q3G(2, VPSRLW, 3, 5, Y6)
	Q3G(4, VPSRLW, 4, 6, Y0)
	Q3G(6, VPSRLW, 5, 7, Y6)
	VPADDD Y6, Y0, Y0
	// sums += (d·y.d)·lanes
	MOVWLZX 108(SI), CX
	VMOVD CX, X10
	VCVTPH2PS X10, X10
	VMULSS 0(DI), X10, X10
	VCVTDQ2PS Y0, Y0
	VBROADCASTSS X10, Y10
	VMULPS Y10, Y0, Y0
	VADDPS Y0, Y15, Y15
	ADDQ $110, SI
	ADDQ $864, DI
	DECQ R8
	JNZ q3v1loop
q3v1fold:
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
	JNZ q3v1row
q3v1done:
	VZEROUPPER
	RET
