//go:build amd64 && !purego

#include "textflag.h"

// The VPERMD dword order and VPSHUFB byte order of the Q4_K kernels
// (gen_q4kv.py's q4kvPerm and q4kvTr; file-local there).
DATA swzPerm<>+0(SB)/8, $0x0000000200000000
DATA swzPerm<>+8(SB)/8, $0x0000000600000004
DATA swzPerm<>+16(SB)/8, $0x0000000300000001
DATA swzPerm<>+24(SB)/8, $0x0000000700000005
GLOBL swzPerm<>(SB), RODATA|NOPTR, $32

DATA swzTr<>+0(SB)/8, $0x0d0905010c080400
DATA swzTr<>+8(SB)/8, $0x0f0b07030e0a0602
DATA swzTr<>+16(SB)/8, $0x0d0905010c080400
DATA swzTr<>+24(SB)/8, $0x0f0b07030e0a0602
GLOBL swzTr<>(SB), RODATA|NOPTR, $32

// func swizzleQ4KAVX2(w *byte, blocks int)
TEXT ·swizzleQ4KAVX2(SB), NOSPLIT, $0-16
	MOVQ w+0(FP), SI
	MOVQ blocks+8(FP), CX
	VMOVDQU swzPerm<>(SB), Y12
	VMOVDQU swzTr<>(SB), Y13
	TESTQ CX, CX
	JEQ done
loop:
	VPERMD 16(SI), Y12, Y0
	VPERMD 48(SI), Y12, Y1
	VPERMD 80(SI), Y12, Y2
	VPERMD 112(SI), Y12, Y3
	VPSHUFB Y13, Y0, Y0
	VPSHUFB Y13, Y1, Y1
	VPSHUFB Y13, Y2, Y2
	VPSHUFB Y13, Y3, Y3
	VMOVDQU Y0, 16(SI)
	VMOVDQU Y1, 48(SI)
	VMOVDQU Y2, 80(SI)
	VMOVDQU Y3, 112(SI)
	ADDQ $144, SI
	DECQ CX
	JNZ loop
done:
	VZEROUPPER
	RET
