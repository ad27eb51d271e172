#include "textflag.h"

// func dotQ4(x *float32, w *uint32, scales *float32, groups, blocks int) float32
TEXT ·dotQ4(SB), NOSPLIT, $0-44
	MOVQ x+0(FP), SI
	MOVQ w+8(FP), DI
	MOVQ scales+16(FP), DX
	MOVQ groups+24(FP), CX
	MOVQ blocks+32(FP), BX
	MOVL $15, AX
	VMOVD AX, X15
	VPBROADCASTD X15, Y15
	VXORPS Y0, Y0, Y0

q4group:
	VXORPS Y1, Y1, Y1
	VXORPS Y6, Y6, Y6
	MOVQ BX, R8

q4block:
	VPMOVZXBD (DI), Y2       // 8 bytes -> 8 dwords, two codes each
	VPAND Y15, Y2, Y3        // low nibbles: codes 0,2,..,14
	VPSRLD $4, Y2, Y4        // high nibbles: codes 1,3,..,15
	VCVTDQ2PS Y3, Y3
	VCVTDQ2PS Y4, Y4
	VFMADD231PS (SI), Y3, Y1
	VFMADD231PS 32(SI), Y4, Y6
	ADDQ $8, DI
	ADDQ $64, SI
	DECQ R8
	JNZ q4block

	VADDPS Y6, Y1, Y1
	VBROADCASTSS (DX), Y5
	VFMADD231PS Y1, Y5, Y0
	ADDQ $4, DX
	DECQ CX
	JNZ q4group

	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VHADDPS X0, X0, X0
	VHADDPS X0, X0, X0
	VZEROUPPER
	MOVSS X0, ret+40(FP)
	RET

// func dotQ8(x *float32, w *uint32, scales *float32, groups, blocks int) float32
TEXT ·dotQ8(SB), NOSPLIT, $0-44
	MOVQ x+0(FP), SI
	MOVQ w+8(FP), DI
	MOVQ scales+16(FP), DX
	MOVQ groups+24(FP), CX
	MOVQ blocks+32(FP), BX
	VXORPS Y0, Y0, Y0

q8group:
	VXORPS Y1, Y1, Y1
	MOVQ BX, R8

q8block:
	VPMOVZXBD (DI), Y2       // 8 codes
	VCVTDQ2PS Y2, Y2
	VFMADD231PS (SI), Y2, Y1
	ADDQ $8, DI
	ADDQ $32, SI
	DECQ R8
	JNZ q8block

	VBROADCASTSS (DX), Y5
	VFMADD231PS Y1, Y5, Y0
	ADDQ $4, DX
	DECQ CX
	JNZ q8group

	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VHADDPS X0, X0, X0
	VHADDPS X0, X0, X0
	VZEROUPPER
	MOVSS X0, ret+40(FP)
	RET
