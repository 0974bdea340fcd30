//go:build amd64 && !purego

#include "textflag.h"

// long file: the F32 and F16 row kernels share the FOLD8 macro (a
// file-local #define), which fixes their one folding order.

// Batched float rows: F32 or F16 weight rows against nv = 1..4 activation
// vectors, several rows per call. Each weight group of 8 is loaded (and for
// F16 converted with VCVTPH2PS) once, then multiplied (VMULPS) and added
// (VADDPS) into each vector's own 8-lane accumulator, and each accumulator
// is folded like reduce8: ((s0+s4)+(s2+s6)) + ((s1+s5)+(s3+s7)). Per vector
// that is exactly the generic 8-lane order, so every result equals
// dotF32Generic / dotF16Generic (rows whose length is a multiple of 8).
//
// func {f32,f16}RowsN(w *byte, rowBytes, rows, groups int, x *float32, xstride int, dst *float32, dstride int)
// dst[r + v·dstride] = row r (at w + r·rowBytes) · vector v (x + v·xstride
// bytes), r < rows, v < N.

// FOLD8(Y, X, T) leaves reduce8 of the 8 lanes of Y in the low float of X
// (X is Y's low half); T is a temporary.
#define FOLD8(Y, X, T) \
	VEXTRACTF128 $1, Y, T \
	VADDPS T, X, X \
	VMOVHLPS X, X, T \
	VADDPS T, X, X \
	VMOVSHDUP X, T \
	VADDSS T, X, X

// F32QUAD_STEP is one step of f32Rows1's four-row loop: 8 floats of x
// (DI) times 8 of each row (SI + 0, 1, 2, 3 rowBytes: R15, BX = 3·R15)
// added into the rows' accumulators Y8-Y11; SI and DI advance 32 bytes.
#define F32QUAD_STEP \
	VMOVUPS (DI), Y4 \
	VMOVUPS (SI), Y0 \
	VMOVUPS (SI)(R15*1), Y1 \
	VMOVUPS (SI)(R15*2), Y2 \
	VMOVUPS (SI)(BX*1), Y3 \
	VMULPS Y4, Y0, Y0 \
	VMULPS Y4, Y1, Y1 \
	VMULPS Y4, Y2, Y2 \
	VMULPS Y4, Y3, Y3 \
	VADDPS Y0, Y8, Y8 \
	VADDPS Y1, Y9, Y9 \
	VADDPS Y2, Y10, Y10 \
	VADDPS Y3, Y11, Y11 \
	ADDQ $32, SI \
	ADDQ $32, DI

TEXT ·f32Rows1(SB), NOSPLIT, $0-64
	MOVQ w+0(FP), R11
	MOVQ rowBytes+8(FP), R15
	LEAQ (R15)(R15*2), BX
	MOVQ dst+48(FP), R12
	MOVQ rows+16(FP), R14
	// four rows at a time: four independent accumulator chains (each row's
	// own order is unchanged), so decode is not bound by VADDPS latency.
	// Rows of at most 1 KiB (a DeltaNet state's 128 floats) take
	// f32r1qloopPF, which prefetches the next four rows (R13, 128 bytes per
	// step, the bytes a step reads): four short rows are one short run that
	// the hardware prefetcher follows poorly (1.4x faster from memory with
	// it); longer rows are four long streams it follows well, and there the
	// same prefetch slowed the product (0.8x), so f32r1qloop has none.
f32r1quad:
	CMPQ R14, $4
	JLT f32r1rest
	MOVQ R11, SI
	MOVQ x+32(FP), DI
	MOVQ groups+24(FP), CX
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11
	TESTQ CX, CX
	JEQ f32r1qfold
	CMPQ R15, $1024
	JGT f32r1qloop
	LEAQ (R11)(R15*4), R13
f32r1qloopPF:
	PREFETCHT0 (R13)
	PREFETCHT0 64(R13)
	ADDQ $128, R13
	F32QUAD_STEP
	DECQ CX
	JNZ f32r1qloopPF
	JMP f32r1qfold
f32r1qloop:
	F32QUAD_STEP
	DECQ CX
	JNZ f32r1qloop
f32r1qfold:
	FOLD8(Y8, X8, X0)
	VMOVSS X8, (R12)
	FOLD8(Y9, X9, X0)
	VMOVSS X9, 4(R12)
	FOLD8(Y10, X10, X0)
	VMOVSS X10, 8(R12)
	FOLD8(Y11, X11, X0)
	VMOVSS X11, 12(R12)
	ADDQ $16, R12
	LEAQ (R11)(R15*4), R11
	SUBQ $4, R14
	JMP f32r1quad
f32r1rest:
	TESTQ R14, R14
	JEQ f32r1done
f32r1row:
	MOVQ R11, SI
	MOVQ x+32(FP), DI
	MOVQ groups+24(FP), CX
	VXORPS Y8, Y8, Y8
	TESTQ CX, CX
	JEQ f32r1fold
f32r1loop:
	VMOVUPS (SI), Y0
	VMULPS (DI), Y0, Y1
	VADDPS Y1, Y8, Y8
	ADDQ $32, SI
	ADDQ $32, DI
	DECQ CX
	JNZ f32r1loop
f32r1fold:
	MOVQ R12, DX
	FOLD8(Y8, X8, X1)
	VMOVSS X8, (DX)
	ADDQ $4, R12
	ADDQ rowBytes+8(FP), R11
	DECQ R14
	JNZ f32r1row
f32r1done:
	VZEROUPPER
	RET

TEXT ·f32Rows2(SB), NOSPLIT, $0-64
	MOVQ w+0(FP), R11
	MOVQ xstride+40(FP), R9
	LEAQ (R9)(R9*2), R10
	MOVQ dst+48(FP), R12
	MOVQ dstride+56(FP), R13
	SHLQ $2, R13
	MOVQ rowBytes+8(FP), R15
	MOVQ rows+16(FP), R14
	// two rows at a time: four independent accumulator chains
f32r2pair:
	CMPQ R14, $2
	JLT f32r2rest
	MOVQ R11, SI
	MOVQ x+32(FP), DI
	MOVQ groups+24(FP), CX
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11
	TESTQ CX, CX
	JEQ f32r2pfold
f32r2ploop:
	VMOVUPS (DI), Y4
	VMOVUPS (DI)(R9*1), Y5
	VMOVUPS (SI), Y0
	VMOVUPS (SI)(R15*1), Y1
	VMULPS Y4, Y0, Y2
	VMULPS Y5, Y0, Y3
	VMULPS Y4, Y1, Y6
	VMULPS Y5, Y1, Y7
	VADDPS Y2, Y8, Y8
	VADDPS Y3, Y9, Y9
	VADDPS Y6, Y10, Y10
	VADDPS Y7, Y11, Y11
	ADDQ $32, SI
	ADDQ $32, DI
	DECQ CX
	JNZ f32r2ploop
f32r2pfold:
	FOLD8(Y8, X8, X0)
	VMOVSS X8, (R12)
	FOLD8(Y9, X9, X0)
	VMOVSS X9, (R12)(R13*1)
	FOLD8(Y10, X10, X0)
	VMOVSS X10, 4(R12)
	FOLD8(Y11, X11, X0)
	VMOVSS X11, 4(R12)(R13*1)
	ADDQ $8, R12
	LEAQ (R11)(R15*2), R11
	SUBQ $2, R14
	JMP f32r2pair
f32r2rest:
	TESTQ R14, R14
	JEQ f32r2done
f32r2row:
	MOVQ R11, SI
	MOVQ x+32(FP), DI
	MOVQ groups+24(FP), CX
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	TESTQ CX, CX
	JEQ f32r2fold
f32r2loop:
	VMOVUPS (SI), Y0
	VMULPS (DI), Y0, Y1
	VMULPS (DI)(R9*1), Y0, Y2
	VADDPS Y1, Y8, Y8
	VADDPS Y2, Y9, Y9
	ADDQ $32, SI
	ADDQ $32, DI
	DECQ CX
	JNZ f32r2loop
f32r2fold:
	MOVQ R12, DX
	FOLD8(Y8, X8, X1)
	VMOVSS X8, (DX)
	ADDQ R13, DX
	FOLD8(Y9, X9, X2)
	VMOVSS X9, (DX)
	ADDQ $4, R12
	ADDQ rowBytes+8(FP), R11
	DECQ R14
	JNZ f32r2row
f32r2done:
	VZEROUPPER
	RET

TEXT ·f32Rows3(SB), NOSPLIT, $0-64
	MOVQ w+0(FP), R11
	MOVQ xstride+40(FP), R9
	LEAQ (R9)(R9*2), R10
	MOVQ dst+48(FP), R12
	MOVQ dstride+56(FP), R13
	SHLQ $2, R13
	MOVQ rows+16(FP), R14
	TESTQ R14, R14
	JEQ f32r3done
f32r3row:
	MOVQ R11, SI
	MOVQ x+32(FP), DI
	MOVQ groups+24(FP), CX
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	TESTQ CX, CX
	JEQ f32r3fold
f32r3loop:
	VMOVUPS (SI), Y0
	VMULPS (DI), Y0, Y1
	VMULPS (DI)(R9*1), Y0, Y2
	VMULPS (DI)(R9*2), Y0, Y3
	VADDPS Y1, Y8, Y8
	VADDPS Y2, Y9, Y9
	VADDPS Y3, Y10, Y10
	ADDQ $32, SI
	ADDQ $32, DI
	DECQ CX
	JNZ f32r3loop
f32r3fold:
	MOVQ R12, DX
	FOLD8(Y8, X8, X1)
	VMOVSS X8, (DX)
	ADDQ R13, DX
	FOLD8(Y9, X9, X2)
	VMOVSS X9, (DX)
	ADDQ R13, DX
	FOLD8(Y10, X10, X3)
	VMOVSS X10, (DX)
	ADDQ $4, R12
	ADDQ rowBytes+8(FP), R11
	DECQ R14
	JNZ f32r3row
f32r3done:
	VZEROUPPER
	RET

TEXT ·f32Rows4(SB), NOSPLIT, $0-64
	MOVQ w+0(FP), R11
	MOVQ xstride+40(FP), R9
	LEAQ (R9)(R9*2), R10
	MOVQ dst+48(FP), R12
	MOVQ dstride+56(FP), R13
	SHLQ $2, R13
	MOVQ rows+16(FP), R14
	TESTQ R14, R14
	JEQ f32r4done
f32r4row:
	MOVQ R11, SI
	MOVQ x+32(FP), DI
	MOVQ groups+24(FP), CX
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11
	TESTQ CX, CX
	JEQ f32r4fold
f32r4loop:
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
	JNZ f32r4loop
f32r4fold:
	MOVQ R12, DX
	FOLD8(Y8, X8, X1)
	VMOVSS X8, (DX)
	ADDQ R13, DX
	FOLD8(Y9, X9, X2)
	VMOVSS X9, (DX)
	ADDQ R13, DX
	FOLD8(Y10, X10, X3)
	VMOVSS X10, (DX)
	ADDQ R13, DX
	FOLD8(Y11, X11, X4)
	VMOVSS X11, (DX)
	ADDQ $4, R12
	ADDQ rowBytes+8(FP), R11
	DECQ R14
	JNZ f32r4row
f32r4done:
	VZEROUPPER
	RET

TEXT ·f16Rows1(SB), NOSPLIT, $0-64
	MOVQ w+0(FP), R11
	MOVQ rowBytes+8(FP), R15
	LEAQ (R15)(R15*2), BX
	MOVQ dst+48(FP), R12
	MOVQ rows+16(FP), R14
	// four rows at a time: four independent accumulator chains (each row's
	// own order is unchanged), so decode is not bound by VADDPS latency
f16r1quad:
	CMPQ R14, $4
	JLT f16r1rest
	MOVQ R11, SI
	MOVQ x+32(FP), DI
	MOVQ groups+24(FP), CX
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11
	TESTQ CX, CX
	JEQ f16r1qfold
f16r1qloop:
	VMOVUPS (DI), Y4
	VCVTPH2PS (SI), Y0
	VCVTPH2PS (SI)(R15*1), Y1
	VCVTPH2PS (SI)(R15*2), Y2
	VCVTPH2PS (SI)(BX*1), Y3
	VMULPS Y4, Y0, Y0
	VMULPS Y4, Y1, Y1
	VMULPS Y4, Y2, Y2
	VMULPS Y4, Y3, Y3
	VADDPS Y0, Y8, Y8
	VADDPS Y1, Y9, Y9
	VADDPS Y2, Y10, Y10
	VADDPS Y3, Y11, Y11
	ADDQ $16, SI
	ADDQ $32, DI
	DECQ CX
	JNZ f16r1qloop
f16r1qfold:
	FOLD8(Y8, X8, X0)
	VMOVSS X8, (R12)
	FOLD8(Y9, X9, X0)
	VMOVSS X9, 4(R12)
	FOLD8(Y10, X10, X0)
	VMOVSS X10, 8(R12)
	FOLD8(Y11, X11, X0)
	VMOVSS X11, 12(R12)
	ADDQ $16, R12
	LEAQ (R11)(R15*4), R11
	SUBQ $4, R14
	JMP f16r1quad
f16r1rest:
	TESTQ R14, R14
	JEQ f16r1done
f16r1row:
	MOVQ R11, SI
	MOVQ x+32(FP), DI
	MOVQ groups+24(FP), CX
	VXORPS Y8, Y8, Y8
	TESTQ CX, CX
	JEQ f16r1fold
f16r1loop:
	VCVTPH2PS (SI), Y0
	VMULPS (DI), Y0, Y1
	VADDPS Y1, Y8, Y8
	ADDQ $16, SI
	ADDQ $32, DI
	DECQ CX
	JNZ f16r1loop
f16r1fold:
	MOVQ R12, DX
	FOLD8(Y8, X8, X1)
	VMOVSS X8, (DX)
	ADDQ $4, R12
	ADDQ rowBytes+8(FP), R11
	DECQ R14
	JNZ f16r1row
f16r1done:
	VZEROUPPER
	RET

TEXT ·f16Rows2(SB), NOSPLIT, $0-64
	MOVQ w+0(FP), R11
	MOVQ xstride+40(FP), R9
	LEAQ (R9)(R9*2), R10
	MOVQ dst+48(FP), R12
	MOVQ dstride+56(FP), R13
	SHLQ $2, R13
	MOVQ rowBytes+8(FP), R15
	MOVQ rows+16(FP), R14
	// two rows at a time: four independent accumulator chains
f16r2pair:
	CMPQ R14, $2
	JLT f16r2rest
	MOVQ R11, SI
	MOVQ x+32(FP), DI
	MOVQ groups+24(FP), CX
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11
	TESTQ CX, CX
	JEQ f16r2pfold
f16r2ploop:
	VMOVUPS (DI), Y4
	VMOVUPS (DI)(R9*1), Y5
	VCVTPH2PS (SI), Y0
	VCVTPH2PS (SI)(R15*1), Y1
	VMULPS Y4, Y0, Y2
	VMULPS Y5, Y0, Y3
	VMULPS Y4, Y1, Y6
	VMULPS Y5, Y1, Y7
	VADDPS Y2, Y8, Y8
	VADDPS Y3, Y9, Y9
	VADDPS Y6, Y10, Y10
	VADDPS Y7, Y11, Y11
	ADDQ $16, SI
	ADDQ $32, DI
	DECQ CX
	JNZ f16r2ploop
f16r2pfold:
	FOLD8(Y8, X8, X0)
	VMOVSS X8, (R12)
	FOLD8(Y9, X9, X0)
	VMOVSS X9, (R12)(R13*1)
	FOLD8(Y10, X10, X0)
	VMOVSS X10, 4(R12)
	FOLD8(Y11, X11, X0)
	VMOVSS X11, 4(R12)(R13*1)
	ADDQ $8, R12
	LEAQ (R11)(R15*2), R11
	SUBQ $2, R14
	JMP f16r2pair
f16r2rest:
	TESTQ R14, R14
	JEQ f16r2done
f16r2row:
	MOVQ R11, SI
	MOVQ x+32(FP), DI
	MOVQ groups+24(FP), CX
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	TESTQ CX, CX
	JEQ f16r2fold
f16r2loop:
	VCVTPH2PS (SI), Y0
	VMULPS (DI), Y0, Y1
	VMULPS (DI)(R9*1), Y0, Y2
	VADDPS Y1, Y8, Y8
	VADDPS Y2, Y9, Y9
	ADDQ $16, SI
	ADDQ $32, DI
	DECQ CX
	JNZ f16r2loop
f16r2fold:
	MOVQ R12, DX
	FOLD8(Y8, X8, X1)
	VMOVSS X8, (DX)
	ADDQ R13, DX
	FOLD8(Y9, X9, X2)
	VMOVSS X9, (DX)
	ADDQ $4, R12
	ADDQ rowBytes+8(FP), R11
	DECQ R14
	JNZ f16r2row
f16r2done:
	VZEROUPPER
	RET

TEXT ·f16Rows3(SB), NOSPLIT, $0-64
	MOVQ w+0(FP), R11
	MOVQ xstride+40(FP), R9
	LEAQ (R9)(R9*2), R10
	MOVQ dst+48(FP), R12
	MOVQ dstride+56(FP), R13
	SHLQ $2, R13
	MOVQ rows+16(FP), R14
	TESTQ R14, R14
	JEQ f16r3done
f16r3row:
	MOVQ R11, SI
	MOVQ x+32(FP), DI
	MOVQ groups+24(FP), CX
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	TESTQ CX, CX
	JEQ f16r3fold
f16r3loop:
	VCVTPH2PS (SI), Y0
	VMULPS (DI), Y0, Y1
	VMULPS (DI)(R9*1), Y0, Y2
	VMULPS (DI)(R9*2), Y0, Y3
	VADDPS Y1, Y8, Y8
	VADDPS Y2, Y9, Y9
	VADDPS Y3, Y10, Y10
	ADDQ $16, SI
	ADDQ $32, DI
	DECQ CX
	JNZ f16r3loop
f16r3fold:
	MOVQ R12, DX
	FOLD8(Y8, X8, X1)
	VMOVSS X8, (DX)
	ADDQ R13, DX
	FOLD8(Y9, X9, X2)
	VMOVSS X9, (DX)
	ADDQ R13, DX
	FOLD8(Y10, X10, X3)
	VMOVSS X10, (DX)
	ADDQ $4, R12
	ADDQ rowBytes+8(FP), R11
	DECQ R14
	JNZ f16r3row
f16r3done:
	VZEROUPPER
	RET

TEXT ·f16Rows4(SB), NOSPLIT, $0-64
	MOVQ w+0(FP), R11
	MOVQ xstride+40(FP), R9
	LEAQ (R9)(R9*2), R10
	MOVQ dst+48(FP), R12
	MOVQ dstride+56(FP), R13
	SHLQ $2, R13
	MOVQ rows+16(FP), R14
	TESTQ R14, R14
	JEQ f16r4done
f16r4row:
	MOVQ R11, SI
	MOVQ x+32(FP), DI
	MOVQ groups+24(FP), CX
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11
	TESTQ CX, CX
	JEQ f16r4fold
f16r4loop:
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
	JNZ f16r4loop
f16r4fold:
	MOVQ R12, DX
	FOLD8(Y8, X8, X1)
	VMOVSS X8, (DX)
	ADDQ R13, DX
	FOLD8(Y9, X9, X2)
	VMOVSS X9, (DX)
	ADDQ R13, DX
	FOLD8(Y10, X10, X3)
	VMOVSS X10, (DX)
	ADDQ R13, DX
	FOLD8(Y11, X11, X4)
	VMOVSS X11, (DX)
	ADDQ $4, R12
	ADDQ rowBytes+8(FP), R11
	DECQ R14
	JNZ f16r4row
f16r4done:
	VZEROUPPER
	RET

// func f16RoundAVX(dst, src *float32, groups int) bool
// dst[i] = float32(half(src[i])) for groups·8 values: VCVTPS2PH with
// round-to-nearest-even (F32ToF16's rounding, subnormals and overflow to
// Inf included), then VCVTPH2PS. Returns true if any value was NaN (whose
// payload F16C keeps but F32ToF16 canonicalises: the caller redoes those).
TEXT ·f16RoundAVX(SB), NOSPLIT, $0-25
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ groups+16(FP), CX
	VXORPS Y7, Y7, Y7
	TESTQ CX, CX
	JEQ f16rnddone
f16rndloop:
	VMOVUPS (SI), Y0
	VCMPPS $3, Y0, Y0, Y1
	VORPS Y1, Y7, Y7
	VCVTPS2PH $0, Y0, X2
	VCVTPH2PS X2, Y2
	VMOVUPS Y2, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	DECQ CX
	JNZ f16rndloop
f16rnddone:
	VPTEST Y7, Y7
	SETNE ret+24(FP)
	VZEROUPPER
	RET
