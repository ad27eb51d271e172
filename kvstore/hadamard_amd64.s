#include "textflag.h"

// Signs of the butterflies of Hadamard's first three stages inside a run of 8: stage h
// pairs lane i with lane i^h, the lower one taking the sum, the upper the difference.
DATA hsign1<>+0(SB)/4, $0x3f800000
DATA hsign1<>+4(SB)/4, $0xbf800000
DATA hsign1<>+8(SB)/4, $0x3f800000
DATA hsign1<>+12(SB)/4, $0xbf800000
DATA hsign1<>+16(SB)/4, $0x3f800000
DATA hsign1<>+20(SB)/4, $0xbf800000
DATA hsign1<>+24(SB)/4, $0x3f800000
DATA hsign1<>+28(SB)/4, $0xbf800000
GLOBL hsign1<>(SB), RODATA|NOPTR, $32

DATA hsign2<>+0(SB)/4, $0x3f800000
DATA hsign2<>+4(SB)/4, $0x3f800000
DATA hsign2<>+8(SB)/4, $0xbf800000
DATA hsign2<>+12(SB)/4, $0xbf800000
DATA hsign2<>+16(SB)/4, $0x3f800000
DATA hsign2<>+20(SB)/4, $0x3f800000
DATA hsign2<>+24(SB)/4, $0xbf800000
DATA hsign2<>+28(SB)/4, $0xbf800000
GLOBL hsign2<>(SB), RODATA|NOPTR, $32

DATA hsign4<>+0(SB)/4, $0x3f800000
DATA hsign4<>+4(SB)/4, $0x3f800000
DATA hsign4<>+8(SB)/4, $0x3f800000
DATA hsign4<>+12(SB)/4, $0x3f800000
DATA hsign4<>+16(SB)/4, $0xbf800000
DATA hsign4<>+20(SB)/4, $0xbf800000
DATA hsign4<>+24(SB)/4, $0xbf800000
DATA hsign4<>+28(SB)/4, $0xbf800000
GLOBL hsign4<>(SB), RODATA|NOPTR, $32

// func hadamard8(x *float32, n int, scale float32)
// Hadamard's butterflies over x (n a power of two, at least 8) in its order, then
// x *= scale: stages 1, 2 and 4 inside each run of 8 as x·sign + partner (one rounding,
// as a+b and a-b round: a multiply by ±1 is exact), stages 8 and up as sums and
// differences of runs.
TEXT ·hadamard8(SB), NOSPLIT, $0-20
	MOVQ x+0(FP), DI
	MOVQ n+8(FP), CX
	VMOVUPS hsign1<>(SB), Y13
	VMOVUPS hsign2<>(SB), Y14
	VMOVUPS hsign4<>(SB), Y15
	MOVQ DI, SI
	MOVQ CX, DX
	SHRQ $3, DX

hrun:
	VMOVUPS (SI), Y0
	VPERMILPS $0xB1, Y0, Y1
	VFMADD213PS Y1, Y13, Y0
	VPERMILPS $0x4E, Y0, Y1
	VFMADD213PS Y1, Y14, Y0
	VPERM2F128 $0x01, Y0, Y0, Y1
	VFMADD213PS Y1, Y15, Y0
	VMOVUPS Y0, (SI)
	ADDQ $32, SI
	DECQ DX
	JNZ hrun

	MOVQ $8, BX              // stage h

hstage:
	CMPQ BX, CX
	JGE hscale
	XORQ R8, R8              // i, by 2h

hblock:
	XORQ R9, R9              // j < h, by 8

hpair:
	LEAQ (R8)(R9*1), R10
	LEAQ (R10)(BX*1), R11
	VMOVUPS (DI)(R10*4), Y0
	VMOVUPS (DI)(R11*4), Y1
	VADDPS Y1, Y0, Y2
	VSUBPS Y1, Y0, Y3
	VMOVUPS Y2, (DI)(R10*4)
	VMOVUPS Y3, (DI)(R11*4)
	ADDQ $8, R9
	CMPQ R9, BX
	JLT hpair
	LEAQ (R8)(BX*2), R8
	CMPQ R8, CX
	JLT hblock
	SHLQ $1, BX
	JMP hstage

hscale:
	VBROADCASTSS scale+16(FP), Y0
	SHRQ $3, CX

hmul:
	VMULPS (DI), Y0, Y1
	VMOVUPS Y1, (DI)
	ADDQ $32, DI
	DECQ CX
	JNZ hmul
	VZEROUPPER
	RET
