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
	VXORPS Y7, Y7, Y7
	VXORPS Y8, Y8, Y8
	MOVQ BX, R8
	SHRQ $1, R8              // two runs of 16 a step (blocks is even: groups are >= 32)

q4block:
	VPMOVZXBD (DI), Y2       // 8 bytes -> 8 dwords, two codes each
	VPMOVZXBD 8(DI), Y9
	VPAND Y15, Y2, Y3        // low nibbles: codes 0,2,..,14
	VPSRLD $4, Y2, Y4        // high nibbles: codes 1,3,..,15
	VPAND Y15, Y9, Y10
	VPSRLD $4, Y9, Y11
	VCVTDQ2PS Y3, Y3
	VCVTDQ2PS Y4, Y4
	VCVTDQ2PS Y10, Y10
	VCVTDQ2PS Y11, Y11
	VFMADD231PS (SI), Y3, Y1
	VFMADD231PS 32(SI), Y4, Y6
	VFMADD231PS 64(SI), Y10, Y7
	VFMADD231PS 96(SI), Y11, Y8
	ADDQ $16, DI
	ADDQ $128, SI
	DECQ R8
	JNZ q4block

	VADDPS Y7, Y1, Y1
	VADDPS Y8, Y6, Y6
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
	VXORPS Y6, Y6, Y6
	MOVQ BX, R8
	SHRQ $1, R8              // two runs of 8 a step (blocks is even: groups are >= 32)

q8block:
	VPMOVZXBD (DI), Y2       // 8 codes
	VPMOVZXBD 8(DI), Y3
	VCVTDQ2PS Y2, Y2
	VCVTDQ2PS Y3, Y3
	VFMADD231PS (SI), Y2, Y1
	VFMADD231PS 32(SI), Y3, Y6
	ADDQ $16, DI
	ADDQ $64, SI
	DECQ R8
	JNZ q8block

	VADDPS Y6, Y1, Y1
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
