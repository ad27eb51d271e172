#include "textflag.h"

// The scales and biases are read as fp16 straight from the cache (VCVTPH2PS), one
// (scale, bias) pair of halfs per group, so a row costs one call.

// func dequant8(dst *float32, codes *uint32, sb *uint16, groups, group int)
// dst[g*group+j] = scale_g*code + bias_g for 8-bit codes (4 a word, low byte first),
// group a multiple of 8. Multiply then add, rounded separately, as the plain Go path.
TEXT ·dequant8(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ codes+8(FP), SI
	MOVQ sb+16(FP), DX
	MOVQ groups+24(FP), R8
	MOVQ group+32(FP), R9
	SHRQ $3, R9

d8group:
	MOVL (DX), BX            // scale, bias as fp16
	VMOVD BX, X1
	VCVTPH2PS X1, X1
	VMOVSHDUP X1, X2
	VBROADCASTSS X1, Y1      // scale
	VBROADCASTSS X2, Y2      // bias
	MOVQ R9, CX

d8block:
	VPMOVZXBD (SI), Y0       // 8 codes -> 8 dwords
	VCVTDQ2PS Y0, Y0
	VMULPS Y1, Y0, Y0
	VADDPS Y2, Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $8, SI
	ADDQ $32, DI
	DECQ CX
	JNZ d8block
	ADDQ $4, DX
	DECQ R8
	JNZ d8group

	VZEROUPPER
	RET

// func dequant4(dst *float32, codes *uint32, sb *uint16, groups, group int, shifts *[8]uint32)
// As dequant8 for 4-bit codes (8 a word, low nibble first): each word is broadcast to
// 8 lanes, shifted right by shifts (0, 4, .., 28) and masked.
TEXT ·dequant4(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DI
	MOVQ codes+8(FP), SI
	MOVQ sb+16(FP), DX
	MOVQ groups+24(FP), R8
	MOVQ group+32(FP), R9
	MOVQ shifts+40(FP), AX
	VMOVDQU (AX), Y3
	MOVL $15, BX
	VMOVD BX, X4
	VPBROADCASTD X4, Y4
	SHRQ $3, R9

d4group:
	MOVL (DX), BX
	VMOVD BX, X1
	VCVTPH2PS X1, X1
	VMOVSHDUP X1, X2
	VBROADCASTSS X1, Y1
	VBROADCASTSS X2, Y2
	MOVQ R9, CX

d4block:
	VPBROADCASTD (SI), Y0    // one word, 8 codes
	VPSRLVD Y3, Y0, Y0
	VPAND Y4, Y0, Y0
	VCVTDQ2PS Y0, Y0
	VMULPS Y1, Y0, Y0
	VADDPS Y2, Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $4, SI
	ADDQ $32, DI
	DECQ CX
	JNZ d4block
	ADDQ $4, DX
	DECQ R8
	JNZ d4group

	VZEROUPPER
	RET

// func dequantQ40(dst *float32, codes *uint32, d *uint16, blocks int, shifts *[8]uint32)
// q4_0: dst[b*32+j] = d_b·(code−8) over blocks blocks of 32 4-bit codes, d_b fp16.
TEXT ·dequantQ40(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ codes+8(FP), SI
	MOVQ d+16(FP), DX
	MOVQ blocks+24(FP), R8
	MOVQ shifts+32(FP), AX
	VMOVDQU (AX), Y3
	MOVL $15, BX
	VMOVD BX, X4
	VPBROADCASTD X4, Y4
	MOVL $0x41000000, BX     // 8.0
	VMOVD BX, X2
	VBROADCASTSS X2, Y2

q4blk:
	MOVWLZX (DX), BX
	VMOVD BX, X1
	VCVTPH2PS X1, X1
	VBROADCASTSS X1, Y1
	MOVQ $4, CX

q4word:
	VPBROADCASTD (SI), Y0
	VPSRLVD Y3, Y0, Y0
	VPAND Y4, Y0, Y0
	VCVTDQ2PS Y0, Y0
	VSUBPS Y2, Y0, Y0
	VMULPS Y1, Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $4, SI
	ADDQ $32, DI
	DECQ CX
	JNZ q4word
	ADDQ $2, DX
	DECQ R8
	JNZ q4blk

	VZEROUPPER
	RET
