//go:build arm64 && !purego

#include "textflag.h"

// func axpyRowNEON(y *float32, a *float32, w *float32, wstride, rows, chunks int)
// y[8c+i] += a[j]·w[j·wstride bytes + 8c+i] for j < rows in order, c <
// chunks, i < 8: per element FMUL then FADD (Axpy's float32(x·a), then the
// add; never FMLA, which would skip the product's rounding), two chunks of
// 8 at a time (four independent chains), then one.
TEXT ·axpyRowNEON(SB), NOSPLIT, $0-48
	MOVD y+0(FP), R0
	MOVD a+8(FP), R1
	MOVD w+16(FP), R2
	MOVD wstride+24(FP), R3
	MOVD rows+32(FP), R4
	MOVD chunks+40(FP), R5
axpypair:
	CMP $2, R5
	BLT axpysingle
	VLD1 (R0), [V0.S4, V1.S4, V2.S4, V3.S4]
	MOVD R2, R6
	MOVD R1, R7
	MOVD R4, R8
axpyploop:
	VLD1R (R7), [V4.S4]
	VLD1 (R6), [V5.S4, V6.S4, V7.S4, V8.S4]
	WORD $0x6e24dca5 // FMUL V5.4S, V5.4S, V4.4S
	WORD $0x6e24dcc6 // FMUL V6.4S, V6.4S, V4.4S
	WORD $0x6e24dce7 // FMUL V7.4S, V7.4S, V4.4S
	WORD $0x6e24dd08 // FMUL V8.4S, V8.4S, V4.4S
	WORD $0x4e25d400 // FADD V0.4S, V0.4S, V5.4S
	WORD $0x4e26d421 // FADD V1.4S, V1.4S, V6.4S
	WORD $0x4e27d442 // FADD V2.4S, V2.4S, V7.4S
	WORD $0x4e28d463 // FADD V3.4S, V3.4S, V8.4S
	ADD $4, R7, R7
	ADD R3, R6, R6
	SUBS $1, R8, R8
	BNE axpyploop
	VST1 [V0.S4, V1.S4, V2.S4, V3.S4], (R0)
	ADD $64, R0, R0
	ADD $64, R2, R2
	SUB $2, R5, R5
	B axpypair
axpysingle:
	CBZ R5, axpydone
	VLD1 (R0), [V0.S4, V1.S4]
	MOVD R2, R6
	MOVD R1, R7
	MOVD R4, R8
axpysloop:
	VLD1R (R7), [V4.S4]
	VLD1 (R6), [V5.S4, V6.S4]
	WORD $0x6e24dca5 // FMUL V5.4S, V5.4S, V4.4S
	WORD $0x6e24dcc6 // FMUL V6.4S, V6.4S, V4.4S
	WORD $0x4e25d400 // FADD V0.4S, V0.4S, V5.4S
	WORD $0x4e26d421 // FADD V1.4S, V1.4S, V6.4S
	ADD $4, R7, R7
	ADD R3, R6, R6
	SUBS $1, R8, R8
	BNE axpysloop
	VST1 [V0.S4, V1.S4], (R0)
axpydone:
	RET
