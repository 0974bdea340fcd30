//go:build amd64 && !purego

#include "textflag.h"

// func axpyRowAVX2(y *float32, a *float32, w *float32, wstride, rows, chunks int)
// y[8c+i] += a[j]·w[j·wstride bytes + 8c+i] for j < rows in order, c <
// chunks, i < 8: per element VMULPS then VADDPS (Axpy's float32(x·a), then
// the add), four chunks of 8 at a time (four independent chains).
TEXT ·axpyRowAVX2(SB), NOSPLIT, $0-48
	MOVQ y+0(FP), DI
	MOVQ a+8(FP), R8
	MOVQ w+16(FP), SI
	MOVQ wstride+24(FP), R9
	MOVQ rows+32(FP), R10
	MOVQ chunks+40(FP), CX
axpyquad:
	CMPQ CX, $4
	JLT axpysingle
	VMOVUPS 0(DI), Y0
	VMOVUPS 32(DI), Y1
	VMOVUPS 64(DI), Y2
	VMOVUPS 96(DI), Y3
	MOVQ SI, R11
	MOVQ R8, R12
	MOVQ R10, R13
axpyqloop:
	VBROADCASTSS (R12), Y4
	VMULPS 0(R11), Y4, Y5
	VMULPS 32(R11), Y4, Y6
	VMULPS 64(R11), Y4, Y7
	VMULPS 96(R11), Y4, Y8
	VADDPS Y5, Y0, Y0
	VADDPS Y6, Y1, Y1
	VADDPS Y7, Y2, Y2
	VADDPS Y8, Y3, Y3
	ADDQ $4, R12
	ADDQ R9, R11
	DECQ R13
	JNZ axpyqloop
	VMOVUPS Y0, 0(DI)
	VMOVUPS Y1, 32(DI)
	VMOVUPS Y2, 64(DI)
	VMOVUPS Y3, 96(DI)
	ADDQ $128, DI
	ADDQ $128, SI
	SUBQ $4, CX
	JMP axpyquad
axpysingle:
	TESTQ CX, CX
	JEQ axpydone
	VMOVUPS 0(DI), Y0
	MOVQ SI, R11
	MOVQ R8, R12
	MOVQ R10, R13
axpysloop:
	VBROADCASTSS (R12), Y4
	VMULPS 0(R11), Y4, Y5
	VADDPS Y5, Y0, Y0
	ADDQ $4, R12
	ADDQ R9, R11
	DECQ R13
	JNZ axpysloop
	VMOVUPS Y0, 0(DI)
	ADDQ $32, DI
	ADDQ $32, SI
	DECQ CX
	JMP axpysingle
axpydone:
	VZEROUPPER
	RET
