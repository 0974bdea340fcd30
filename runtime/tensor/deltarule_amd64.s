//go:build amd64 && !purego

#include "textflag.h"

// func decayAddDotAVX2(st *float32, groups, rows int, d float32, a, x, q, o, k2, kn *float32)
//
// Per row j (8·groups floats at st + j·32·groups): each group of 8 is
// updated as r = d·r + a[j]·x (VMULPS, VMULPS, VADDPS: decayAdd's two
// rounded products and one rounded sum, no FMA) and stored, then r·q (and
// r·k2 when kn is not nil) is added to one 8-lane accumulator per dot
// (VMULPS, VADDPS), folded like reduce8: dotF32Generic's order exactly.

// FOLD8(Y, X, T) leaves reduce8 of the 8 lanes of Y in the low float of X.
#define FOLD8(Y, X, T) \
	VEXTRACTF128 $1, Y, T \
	VADDPS T, X, X \
	VMOVHLPS X, X, T \
	VADDPS T, X, X \
	VMOVSHDUP X, T \
	VADDSS T, X, X

TEXT ·decayAddDotAVX2(SB), NOSPLIT, $0-80
	MOVQ st+0(FP), SI
	MOVQ groups+8(FP), R8
	MOVQ rows+16(FP), R9
	VBROADCASTSS d+24(FP), Y15
	MOVQ a+32(FP), R10
	MOVQ x+40(FP), R11
	MOVQ q+48(FP), R12
	MOVQ o+56(FP), R13
	MOVQ k2+64(FP), R14
	MOVQ kn+72(FP), R15
	TESTQ R15, R15
	JNE two

one:
	VBROADCASTSS (R10), Y14
	VXORPS Y8, Y8, Y8
	MOVQ R11, AX
	MOVQ R12, BX
	MOVQ R8, CX
oneloop:
	VMULPS (SI), Y15, Y0
	VMULPS (AX), Y14, Y1
	VADDPS Y1, Y0, Y0
	VMOVUPS Y0, (SI)
	VMULPS (BX), Y0, Y2
	VADDPS Y2, Y8, Y8
	ADDQ $32, SI
	ADDQ $32, AX
	ADDQ $32, BX
	DECQ CX
	JNZ oneloop
	FOLD8(Y8, X8, X0)
	VMOVSS X8, (R13)
	ADDQ $4, R10
	ADDQ $4, R13
	DECQ R9
	JNZ one
	VZEROUPPER
	RET

two:
	VBROADCASTSS (R10), Y14
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	MOVQ R11, AX
	MOVQ R12, BX
	MOVQ R14, DX
	MOVQ R8, CX
twoloop:
	VMULPS (SI), Y15, Y0
	VMULPS (AX), Y14, Y1
	VADDPS Y1, Y0, Y0
	VMOVUPS Y0, (SI)
	VMULPS (BX), Y0, Y2
	VADDPS Y2, Y8, Y8
	VMULPS (DX), Y0, Y3
	VADDPS Y3, Y9, Y9
	ADDQ $32, SI
	ADDQ $32, AX
	ADDQ $32, BX
	ADDQ $32, DX
	DECQ CX
	JNZ twoloop
	FOLD8(Y8, X8, X0)
	VMOVSS X8, (R13)
	FOLD8(Y9, X9, X0)
	VMOVSS X9, (R15)
	ADDQ $4, R10
	ADDQ $4, R13
	ADDQ $4, R15
	DECQ R9
	JNZ two
	VZEROUPPER
	RET
