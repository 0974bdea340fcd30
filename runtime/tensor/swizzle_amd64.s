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
	// scales and mins as kernel()'s unpack computes them: DX, R11
	MOVL 4(SI), AX
	MOVL 8(SI), BX
	MOVL 12(SI), R8
	MOVL AX, DX
	ANDL $0x3f3f3f3f, DX
	MOVL AX, R9
	SHRL $6, R9
	ANDL $0x03030303, R9
	SHLL $4, R9
	MOVL R8, R10
	ANDL $0x0f0f0f0f, R10
	ORL R10, R9
	SHLQ $32, R9
	ORQ R9, DX
	MOVL BX, R11
	ANDL $0x3f3f3f3f, R11
	MOVL BX, R9
	SHRL $6, R9
	ANDL $0x03030303, R9
	SHLL $4, R9
	MOVL R8, R10
	SHRL $4, R10
	ANDL $0x0f0f0f0f, R10
	ORL R10, R9
	SHLQ $32, R9
	ORQ R9, R11
	// low nibbles: scale | min<<4 per byte
	MOVQ $0x0f0f0f0f0f0f0f0f, R10
	MOVQ DX, AX
	ANDQ R10, AX
	MOVQ R11, BX
	ANDQ R10, BX
	SHLQ $4, BX
	ORQ BX, AX
	MOVQ AX, 4(SI)
	// top two bits: scales' at 2j, mins' at 16+2j
	MOVQ $0x3030303030303030, R10
	PEXTQ R10, DX, AX
	PEXTQ R10, R11, BX
	SHLL $16, BX
	ORL BX, AX
	MOVL AX, 12(SI)
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

// func cpuid(eax, ecx uint32) (a, b, c, d uint32)
TEXT ·cpuid(SB), NOSPLIT, $0-24
	MOVL eax+0(FP), AX
	MOVL ecx+4(FP), CX
	CPUID
	MOVL AX, a+8(FP)
	MOVL BX, b+12(FP)
	MOVL CX, c+16(FP)
	MOVL DX, d+20(FP)
	RET
