//go:build amd64 && !purego

#include "textflag.h"

// Batched Q8_0 × Q8_0 rows (q8_0RowsAVX2), also the single-vector decode
// kernel (nv = 1). Per block the integer sum is exact in any order:
// |w| (VPABSB) times the activation carrying w's sign (VPSIGNB) in
// VPMADDUBSW (pairs at most 2·128·127 < 2^15, no saturation), then
// VPMADDWD by ones. Eight blocks are processed together: their eight dword
// vectors are reduced with VPHADDD to one vector of eight block sums, so
// the per-block horizontal sum is shared. The float combination is
// dotQ8_0Q8_0Generic's, block after block: sumf += float32(sumi)·(dx·dy)
// (the products for eight blocks are formed in one YMM, each rounded as the
// scalar code rounds it, then added to sumf one at a time, in block order).
// Weights are read and prepared (|w|, dx) once per group of eight blocks
// for all nv ≤ 8 vectors.

DATA q8Ones<>+0(SB)/8, $0x0001000100010001
DATA q8Ones<>+8(SB)/8, $0x0001000100010001
DATA q8Ones<>+16(SB)/8, $0x0001000100010001
DATA q8Ones<>+24(SB)/8, $0x0001000100010001
GLOBL q8Ones<>(SB), RODATA|NOPTR, $32

// Q8BLK(K, R): the dword vector of block K of the group (weights at SI +
// 34K, |w| in register YK; activation at DI + 36K) into R. Clobbers only R.
#define Q8BLK(K, AW, R) \
	VMOVDQU (36*K+4)(DI), R \
	VPSIGNB (34*K+2)(SI), R, R \
	VPMADDUBSW R, AW, R \
	VPMADDWD Y15, R, R

// func q8_0RowsAVX2(w *byte, rowBytes, rows int, y *blockQ8_0, yd *float32, nb, nv, ystride int, dst *float32, dstride int)
// For rows consecutive Q8_0 rows (rowBytes apart, nb blocks each) and nv ≤ 8
// vectors (vector v's blocks at y + v·ystride bytes, their scales dy at
// yd + v·4·nb bytes, contiguous), stores row r · vector v at
// dst[r + v·dstride]. Frame: 0..31 sumf per vector, 32..63 the eight
// products of a group, 64 the row pointer.
TEXT ·q8_0RowsAVX2(SB), $80-80
	MOVQ w+0(FP), SI
	VMOVDQU q8Ones<>(SB), Y15
	MOVQ rows+16(FP), AX
	TESTQ AX, AX
	JEQ q8rsdone
q8rsrow:
	MOVQ SI, 64(SP)
	VXORPS Y0, Y0, Y0
	VMOVUPS Y0, 0(SP)
	MOVQ nb+40(FP), R8
	SHRQ $3, R8 // groups of 8 blocks
	XORQ R9, R9 // first block of the group
	TESTQ R8, R8
	JEQ q8rstail
q8rsgroup:
	VPABSB 2(SI), Y0
	VPABSB 36(SI), Y1
	VPABSB 70(SI), Y2
	VPABSB 104(SI), Y3
	VPABSB 138(SI), Y4
	VPABSB 172(SI), Y5
	VPABSB 206(SI), Y6
	VPABSB 240(SI), Y7
	MOVWLZX 0(SI), AX
	VMOVD AX, X8
	VPINSRW $1, 34(SI), X8, X8
	VPINSRW $2, 68(SI), X8, X8
	VPINSRW $3, 102(SI), X8, X8
	VPINSRW $4, 136(SI), X8, X8
	VPINSRW $5, 170(SI), X8, X8
	VPINSRW $6, 204(SI), X8, X8
	VPINSRW $7, 238(SI), X8, X8
	VCVTPH2PS X8, Y8 // dx of the 8 blocks
	// DI: vector 0's block R9; R10: its dy; R12: its sumf
	MOVQ R9, AX
	IMULQ $36, AX
	MOVQ y+24(FP), DI
	ADDQ AX, DI
	MOVQ yd+32(FP), R10
	LEAQ (R10)(R9*4), R10
	MOVQ SP, R12
	MOVQ nv+48(FP), R11
q8rsvec:
	Q8BLK(0, Y0, Y9)
	Q8BLK(1, Y1, Y10)
	VPHADDD Y10, Y9, Y9 // t01
	Q8BLK(2, Y2, Y10)
	Q8BLK(3, Y3, Y11)
	VPHADDD Y11, Y10, Y10 // t23
	VPHADDD Y10, Y9, Y9 // u0: sums 0-3 of blocks 0-3 | sums 4-7
	Q8BLK(4, Y4, Y10)
	Q8BLK(5, Y5, Y11)
	VPHADDD Y11, Y10, Y10 // t45
	Q8BLK(6, Y6, Y11)
	Q8BLK(7, Y7, Y12)
	VPHADDD Y12, Y11, Y11 // t67
	VPHADDD Y11, Y10, Y10 // u1
	VPERM2I128 $0x20, Y10, Y9, Y11
	VPERM2I128 $0x31, Y10, Y9, Y12
	VPADDD Y12, Y11, Y11 // sumi of blocks 0..7
	VCVTDQ2PS Y11, Y11
	VMULPS (R10), Y8, Y12 // dx·dy
	VMULPS Y12, Y11, Y11
	VMOVUPS Y11, 32(SP)
	VMOVSS (R12), X13
	VADDSS 32(SP), X13, X13
	VADDSS 36(SP), X13, X13
	VADDSS 40(SP), X13, X13
	VADDSS 44(SP), X13, X13
	VADDSS 48(SP), X13, X13
	VADDSS 52(SP), X13, X13
	VADDSS 56(SP), X13, X13
	VADDSS 60(SP), X13, X13
	VMOVSS X13, (R12)
	ADDQ ystride+56(FP), DI
	MOVQ nb+40(FP), AX
	LEAQ (R10)(AX*4), R10
	ADDQ $4, R12
	DECQ R11
	JNZ q8rsvec
	ADDQ $272, SI
	ADDQ $8, R9
	DECQ R8
	JNZ q8rsgroup
q8rstail:
	// the remaining nb mod 8 blocks, one at a time
	CMPQ R9, nb+40(FP)
	JGE q8rsout
	VPABSB 2(SI), Y0
	MOVWLZX 0(SI), AX
	VMOVD AX, X8
	VCVTPH2PS X8, X8
	MOVQ R9, AX
	IMULQ $36, AX
	MOVQ y+24(FP), DI
	ADDQ AX, DI
	MOVQ yd+32(FP), R10
	LEAQ (R10)(R9*4), R10
	MOVQ SP, R12
	MOVQ nv+48(FP), R11
q8rstvec:
	Q8BLK(0, Y0, Y9)
	VEXTRACTI128 $1, Y9, X10
	VPADDD X10, X9, X9
	VPSHUFD $0x4e, X9, X10
	VPADDD X10, X9, X9
	VPSHUFD $0xb1, X9, X10
	VPADDD X10, X9, X9
	VMOVD X9, AX
	VCVTSI2SSL AX, X11, X11
	VMULSS (R10), X8, X12 // dx·dy
	VMULSS X12, X11, X11
	VMOVSS (R12), X13
	VADDSS X11, X13, X13
	VMOVSS X13, (R12)
	ADDQ ystride+56(FP), DI
	MOVQ nb+40(FP), AX
	LEAQ (R10)(AX*4), R10
	ADDQ $4, R12
	DECQ R11
	JNZ q8rstvec
	ADDQ $34, SI
	INCQ R9
	JMP q8rstail
q8rsout:
	MOVQ SP, R12
	MOVQ dst+64(FP), DI
	MOVQ dstride+72(FP), R9
	SHLQ $2, R9
	MOVQ nv+48(FP), R11
q8rsstore:
	MOVL (R12), AX
	MOVL AX, (DI)
	ADDQ $4, R12
	ADDQ R9, DI
	DECQ R11
	JNZ q8rsstore
	ADDQ $4, dst+64(FP)
	MOVQ 64(SP), SI
	ADDQ rowBytes+8(FP), SI
	DECQ rows+16(FP)
	JNZ q8rsrow
q8rsdone:
	VZEROUPPER
	RET

// func q8_0Vecs1AVX2(w *byte, rows int, y *blockQ8_0, yd *float32, nb int, dst *float32)
// The single-vector (decode) form of q8_0RowsAVX2 for rows consecutive rows
// of nb blocks: weights streamed once with a prefetch 4 KiB ahead, sumf kept
// in X14 and the eight products of a group added to it straight from their
// register in block order (no frame), so the result is q8_0RowsAVX2's and
// dotQ8_0Q8_0Generic's, bit for bit.
TEXT ·q8_0Vecs1AVX2(SB), NOSPLIT, $0-48
	MOVQ w+0(FP), SI
	MOVQ dst+40(FP), DX
	VMOVDQU q8Ones<>(SB), Y15
	MOVQ rows+8(FP), BX
	TESTQ BX, BX
	JEQ q8v1done
q8v1row:
	VXORPS X14, X14, X14
	MOVQ y+16(FP), DI
	MOVQ yd+24(FP), R10
	MOVQ nb+32(FP), R8
	SHRQ $3, R8 // groups of 8 blocks
	JEQ q8v1tail
q8v1group:
	PREFETCHT0 4096(SI)
	PREFETCHT0 4160(SI)
	PREFETCHT0 4224(SI)
	PREFETCHT0 4288(SI)
	PREFETCHT0 4352(SI)
	VPABSB 2(SI), Y0
	VPABSB 36(SI), Y1
	VPABSB 70(SI), Y2
	VPABSB 104(SI), Y3
	VPABSB 138(SI), Y4
	VPABSB 172(SI), Y5
	VPABSB 206(SI), Y6
	VPABSB 240(SI), Y7
	MOVWLZX 0(SI), AX
	VMOVD AX, X8
	VPINSRW $1, 34(SI), X8, X8
	VPINSRW $2, 68(SI), X8, X8
	VPINSRW $3, 102(SI), X8, X8
	VPINSRW $4, 136(SI), X8, X8
	VPINSRW $5, 170(SI), X8, X8
	VPINSRW $6, 204(SI), X8, X8
	VPINSRW $7, 238(SI), X8, X8
	VCVTPH2PS X8, Y8 // dx of the 8 blocks
	Q8BLK(0, Y0, Y9)
	Q8BLK(1, Y1, Y10)
	VPHADDD Y10, Y9, Y9
	Q8BLK(2, Y2, Y10)
	Q8BLK(3, Y3, Y11)
	VPHADDD Y11, Y10, Y10
	VPHADDD Y10, Y9, Y9
	Q8BLK(4, Y4, Y10)
	Q8BLK(5, Y5, Y11)
	VPHADDD Y11, Y10, Y10
	Q8BLK(6, Y6, Y11)
	Q8BLK(7, Y7, Y12)
	VPHADDD Y12, Y11, Y11
	VPHADDD Y11, Y10, Y10
	VPERM2I128 $0x20, Y10, Y9, Y11
	VPERM2I128 $0x31, Y10, Y9, Y12
	VPADDD Y12, Y11, Y11 // sumi of blocks 0..7
	VCVTDQ2PS Y11, Y11
	VMULPS (R10), Y8, Y12 // dx·dy
	VMULPS Y12, Y11, Y11
	// sumf += product of block 0, 1, ..., 7
	VADDSS X11, X14, X14
	VMOVSHDUP X11, X13
	VADDSS X13, X14, X14
	VMOVHLPS X11, X13, X13
	VADDSS X13, X14, X14
	VPERMILPS $0xff, X11, X13
	VADDSS X13, X14, X14
	VEXTRACTF128 $1, Y11, X11
	VADDSS X11, X14, X14
	VMOVSHDUP X11, X13
	VADDSS X13, X14, X14
	VMOVHLPS X11, X13, X13
	VADDSS X13, X14, X14
	VPERMILPS $0xff, X11, X13
	VADDSS X13, X14, X14
	ADDQ $272, SI
	ADDQ $288, DI
	ADDQ $32, R10
	DECQ R8
	JNZ q8v1group
q8v1tail:
	// the remaining nb mod 8 blocks, one at a time
	MOVQ nb+32(FP), R8
	ANDQ $7, R8
	JEQ q8v1store
q8v1tblock:
	VPABSB 2(SI), Y0
	MOVWLZX 0(SI), AX
	VMOVD AX, X8
	VCVTPH2PS X8, X8
	Q8BLK(0, Y0, Y9)
	VEXTRACTI128 $1, Y9, X10
	VPADDD X10, X9, X9
	VPSHUFD $0x4e, X9, X10
	VPADDD X10, X9, X9
	VPSHUFD $0xb1, X9, X10
	VPADDD X10, X9, X9
	VMOVD X9, AX
	VCVTSI2SSL AX, X11, X11
	VMULSS (R10), X8, X12 // dx·dy
	VMULSS X12, X11, X11
	VADDSS X11, X14, X14
	ADDQ $34, SI
	ADDQ $36, DI
	ADDQ $4, R10
	DECQ R8
	JNZ q8v1tblock
q8v1store:
	VMOVSS X14, (DX)
	ADDQ $4, DX
	DECQ BX
	JNZ q8v1row
q8v1done:
	VZEROUPPER
	RET
