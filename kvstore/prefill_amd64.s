#include "textflag.h"

// func mm6x16(a *float32, astride int, b *float32, bstride int, n int, c *float32, cstride int, acc bool, panels, bnext, cnext int)
// For each panel p < panels: c[p·cnext + i·cstride+j] = (acc ? that : 0) +
// Σ_{e<n} a[i·astride+e]·b[p·bnext + e·bstride+j] for 6 rows i of a and 16 columns j of
// the panel of b (strides in floats, n >= 1, panels >= 1): twelve sums in registers, two
// loads of b and six broadcasts of a per twelve multiply-adds. The panels' pointers
// advance in their argument slots, the registers being all taken.
TEXT ·mm6x16(SB), NOSPLIT, $0-88
	MOVQ astride+8(FP), R8
	SHLQ $2, R8
	MOVQ bstride+24(FP), R11
	SHLQ $2, R11
	MOVQ cstride+48(FP), R12
	SHLQ $2, R12
	LEAQ (R8)(R8*2), R9   // 3·astride
	LEAQ (R8)(R8*4), R10  // 5·astride
	LEAQ (R12)(R12*2), R13 // 3·cstride

panel:
	MOVQ a+0(FP), SI
	MOVQ b+16(FP), DI
	MOVQ n+32(FP), CX
	MOVQ c+40(FP), DX
	LEAQ (DX)(R12*4), AX  // row 4 of c
	MOVBLZX acc+56(FP), BX
	TESTQ BX, BX
	JZ zero
	VMOVUPS (DX), Y0
	VMOVUPS 32(DX), Y1
	VMOVUPS (DX)(R12*1), Y2
	VMOVUPS 32(DX)(R12*1), Y3
	VMOVUPS (DX)(R12*2), Y4
	VMOVUPS 32(DX)(R12*2), Y5
	VMOVUPS (DX)(R13*1), Y6
	VMOVUPS 32(DX)(R13*1), Y7
	VMOVUPS (AX), Y8
	VMOVUPS 32(AX), Y9
	VMOVUPS (AX)(R12*1), Y10
	VMOVUPS 32(AX)(R12*1), Y11
	JMP loop

zero:
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11

loop:
	VMOVUPS (DI), Y12
	VMOVUPS 32(DI), Y13
	VBROADCASTSS (SI), Y14
	VFMADD231PS Y12, Y14, Y0
	VFMADD231PS Y13, Y14, Y1
	VBROADCASTSS (SI)(R8*1), Y14
	VFMADD231PS Y12, Y14, Y2
	VFMADD231PS Y13, Y14, Y3
	VBROADCASTSS (SI)(R8*2), Y14
	VFMADD231PS Y12, Y14, Y4
	VFMADD231PS Y13, Y14, Y5
	VBROADCASTSS (SI)(R9*1), Y14
	VFMADD231PS Y12, Y14, Y6
	VFMADD231PS Y13, Y14, Y7
	VBROADCASTSS (SI)(R8*4), Y14
	VFMADD231PS Y12, Y14, Y8
	VFMADD231PS Y13, Y14, Y9
	VBROADCASTSS (SI)(R10*1), Y14
	VFMADD231PS Y12, Y14, Y10
	VFMADD231PS Y13, Y14, Y11
	ADDQ $4, SI
	ADDQ R11, DI
	DECQ CX
	JNZ loop

	VMOVUPS Y0, (DX)
	VMOVUPS Y1, 32(DX)
	VMOVUPS Y2, (DX)(R12*1)
	VMOVUPS Y3, 32(DX)(R12*1)
	VMOVUPS Y4, (DX)(R12*2)
	VMOVUPS Y5, 32(DX)(R12*2)
	VMOVUPS Y6, (DX)(R13*1)
	VMOVUPS Y7, 32(DX)(R13*1)
	VMOVUPS Y8, (AX)
	VMOVUPS Y9, 32(AX)
	VMOVUPS Y10, (AX)(R12*1)
	VMOVUPS Y11, 32(AX)(R12*1)
	MOVQ bnext+72(FP), BX
	SHLQ $2, BX
	ADDQ BX, b+16(FP)
	MOVQ cnext+80(FP), BX
	SHLQ $2, BX
	ADDQ BX, c+40(FP)
	DECQ panels+64(FP)
	JNZ panel
	VZEROUPPER
	RET
