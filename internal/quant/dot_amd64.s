#include "textflag.h"

// func dot4x8(x, w *float32, stride, n int, out *[4]float32)
TEXT ·dot4x8(SB), NOSPLIT, $0-40
	MOVQ x+0(FP), SI
	MOVQ w+8(FP), DI
	MOVQ stride+16(FP), R9
	SHLQ $2, R9
	MOVQ n+24(FP), CX
	MOVQ out+32(FP), DX
	LEAQ (DI)(R9*1), R10
	LEAQ (R10)(R9*1), R11
	LEAQ (R11)(R9*1), R12
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	VXORPS Y8, Y8, Y8

	// 16 values a step with two accumulators per row, then a last 8 if n is odd in 8s.
	MOVQ CX, R8
	SHRQ $4, R8
	JZ tail

loop16:
	VMOVUPS (SI), Y4
	VMOVUPS 32(SI), Y9
	VFMADD231PS (DI), Y4, Y0
	VFMADD231PS (R10), Y4, Y1
	VFMADD231PS (R11), Y4, Y2
	VFMADD231PS (R12), Y4, Y3
	VFMADD231PS 32(DI), Y9, Y5
	VFMADD231PS 32(R10), Y9, Y6
	VFMADD231PS 32(R11), Y9, Y7
	VFMADD231PS 32(R12), Y9, Y8
	ADDQ $64, SI
	ADDQ $64, DI
	ADDQ $64, R10
	ADDQ $64, R11
	ADDQ $64, R12
	DECQ R8
	JNZ loop16

tail:
	TESTQ $8, CX
	JZ done
	VMOVUPS (SI), Y4
	VFMADD231PS (DI), Y4, Y0
	VFMADD231PS (R10), Y4, Y1
	VFMADD231PS (R11), Y4, Y2
	VFMADD231PS (R12), Y4, Y3

done:
	VADDPS Y5, Y0, Y0
	VADDPS Y6, Y1, Y1
	VADDPS Y7, Y2, Y2
	VADDPS Y8, Y3, Y3
	VHADDPS Y1, Y0, Y0
	VHADDPS Y3, Y2, Y2
	VHADDPS Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VMOVUPS X0, (DX)
	VZEROUPPER
	RET

// func dot4x8x2(x0, x1, w *float32, stride, n int, out *[8]float32)
// out[k] = x0·w_k, out[4+k] = x1·w_k for the rows w_k = w + k*stride, n a positive
// multiple of 8: two tokens against four rows, eight accumulators.
TEXT ·dot4x8x2(SB), NOSPLIT, $0-48
	MOVQ x0+0(FP), SI
	MOVQ x1+8(FP), BX
	MOVQ w+16(FP), DI
	MOVQ stride+24(FP), R9
	SHLQ $2, R9
	MOVQ n+32(FP), CX
	MOVQ out+40(FP), DX
	LEAQ (DI)(R9*1), R10
	LEAQ (R10)(R9*1), R11
	LEAQ (R11)(R9*1), R12
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	SHRQ $3, CX

loop2:
	VMOVUPS (SI), Y8
	VMOVUPS (BX), Y9
	VMOVUPS (DI), Y10
	VFMADD231PS Y8, Y10, Y0
	VFMADD231PS Y9, Y10, Y4
	VMOVUPS (R10), Y11
	VFMADD231PS Y8, Y11, Y1
	VFMADD231PS Y9, Y11, Y5
	VMOVUPS (R11), Y12
	VFMADD231PS Y8, Y12, Y2
	VFMADD231PS Y9, Y12, Y6
	VMOVUPS (R12), Y13
	VFMADD231PS Y8, Y13, Y3
	VFMADD231PS Y9, Y13, Y7
	ADDQ $32, SI
	ADDQ $32, BX
	ADDQ $32, DI
	ADDQ $32, R10
	ADDQ $32, R11
	ADDQ $32, R12
	DECQ CX
	JNZ loop2

	VHADDPS Y1, Y0, Y0
	VHADDPS Y3, Y2, Y2
	VHADDPS Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VMOVUPS X0, (DX)
	VHADDPS Y5, Y4, Y4
	VHADDPS Y7, Y6, Y6
	VHADDPS Y6, Y4, Y4
	VEXTRACTF128 $1, Y4, X5
	VADDPS X5, X4, X4
	VMOVUPS X4, 16(DX)
	VZEROUPPER
	RET

// func axpy4x8(y, w *float32, stride, n int, p *[4]float32)
TEXT ·axpy4x8(SB), NOSPLIT, $0-40
	MOVQ y+0(FP), SI
	MOVQ w+8(FP), DI
	MOVQ stride+16(FP), R9
	SHLQ $2, R9
	MOVQ n+24(FP), CX
	MOVQ p+32(FP), DX
	LEAQ (DI)(R9*1), R10
	LEAQ (R10)(R9*1), R11
	LEAQ (R11)(R9*1), R12
	VBROADCASTSS (DX), Y0
	VBROADCASTSS 4(DX), Y1
	VBROADCASTSS 8(DX), Y2
	VBROADCASTSS 12(DX), Y3
	SHRQ $3, CX

axloop:
	VMOVUPS (SI), Y4
	VFMADD231PS (DI), Y0, Y4
	VFMADD231PS (R10), Y1, Y4
	VFMADD231PS (R11), Y2, Y4
	VFMADD231PS (R12), Y3, Y4
	VMOVUPS Y4, (SI)
	ADDQ $32, SI
	ADDQ $32, DI
	ADDQ $32, R10
	ADDQ $32, R11
	ADDQ $32, R12
	DECQ CX
	JNZ axloop

	VZEROUPPER
	RET

// func widen8(dst *float32, src *uint16, n int)
TEXT ·widen8(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $3, CX

wloop:
	VCVTPH2PS (SI), Y0
	VMOVUPS Y0, (DI)
	ADDQ $16, SI
	ADDQ $32, DI
	DECQ CX
	JNZ wloop

	VZEROUPPER
	RET

// Constants of swiglu8's e^x: log2 e, ln 2 split in two, the Taylor coefficients 1/7!
// .. 1/2!, 1, and the clamp [-87, 88] that keeps 2^k a normal float.
DATA expc<>+0(SB)/4, $0x3fb8aa3b
DATA expc<>+4(SB)/4, $0x3f317200
DATA expc<>+8(SB)/4, $0x35bfbe8e
DATA expc<>+12(SB)/4, $0x39500d01
DATA expc<>+16(SB)/4, $0x3ab60b61
DATA expc<>+20(SB)/4, $0x3c088889
DATA expc<>+24(SB)/4, $0x3d2aaaab
DATA expc<>+28(SB)/4, $0x3e2aaaab
DATA expc<>+32(SB)/4, $0x3f000000
DATA expc<>+36(SB)/4, $0x3f800000
DATA expc<>+40(SB)/4, $0x42b00000
DATA expc<>+44(SB)/4, $0xc2ae0000
GLOBL expc<>(SB), RODATA|NOPTR, $48

// func swiglu8(out, gate, up *float32, n int)
// out = g·u / (1 + e^-g) over n values, n a positive multiple of 8.
TEXT ·swiglu8(SB), NOSPLIT, $0-32
	MOVQ out+0(FP), DI
	MOVQ gate+8(FP), SI
	MOVQ up+16(FP), DX
	MOVQ n+24(FP), CX
	SHRQ $3, CX
	VBROADCASTSS expc<>+0(SB), Y15
	VBROADCASTSS expc<>+4(SB), Y14
	VBROADCASTSS expc<>+8(SB), Y13
	VBROADCASTSS expc<>+36(SB), Y12
	VBROADCASTSS expc<>+40(SB), Y11
	VBROADCASTSS expc<>+44(SB), Y10
	MOVL $127, AX
	VMOVD AX, X9
	VPBROADCASTD X9, Y9

sgloop:
	VMOVUPS (SI), Y0            // g
	VXORPS Y1, Y1, Y1
	VSUBPS Y0, Y1, Y1           // x = -g
	VMINPS Y11, Y1, Y1
	VMAXPS Y10, Y1, Y1
	VMULPS Y15, Y1, Y2
	VROUNDPS $0, Y2, Y2         // k = round(x·log2 e)
	VMOVAPS Y1, Y3
	VFNMADD231PS Y14, Y2, Y3    // r = x - k·ln2
	VFNMADD231PS Y13, Y2, Y3
	VBROADCASTSS expc<>+12(SB), Y4
	VBROADCASTSS expc<>+16(SB), Y5
	VFMADD213PS Y5, Y3, Y4      // Horner: p = p·r + c
	VBROADCASTSS expc<>+20(SB), Y5
	VFMADD213PS Y5, Y3, Y4
	VBROADCASTSS expc<>+24(SB), Y5
	VFMADD213PS Y5, Y3, Y4
	VBROADCASTSS expc<>+28(SB), Y5
	VFMADD213PS Y5, Y3, Y4
	VBROADCASTSS expc<>+32(SB), Y5
	VFMADD213PS Y5, Y3, Y4
	VFMADD213PS Y12, Y3, Y4
	VFMADD213PS Y12, Y3, Y4     // p ≈ e^r
	VCVTPS2DQ Y2, Y6
	VPADDD Y9, Y6, Y6
	VPSLLD $23, Y6, Y6          // 2^k
	VMULPS Y6, Y4, Y4           // e^x
	VADDPS Y12, Y4, Y4          // 1 + e^-g
	VMULPS (DX), Y0, Y0         // g·u
	VDIVPS Y4, Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $32, DI
	DECQ CX
	JNZ sgloop

	VZEROUPPER
	RET

// func dequantQ4F32(dst *float32, w *uint32, scales, biases unsafe.Pointer, groups, blocks int)
// dst = scale·code + bias for groups groups of blocks runs of 16 4-bit codes, in order;
// float32 scales and biases (the BF16 and F16 variants differ only in how they load them).
TEXT ·dequantQ4F32(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DI
	MOVQ w+8(FP), SI
	MOVQ scales+16(FP), DX
	MOVQ biases+24(FP), R13
	MOVQ groups+32(FP), CX
	MOVQ blocks+40(FP), BX
	MOVL $15, AX
	VMOVD AX, X15
	VPBROADCASTD X15, Y15

dqgroup:
	VBROADCASTSS (DX), Y13     // float32 scales and biases
	VMOVSS (R13), X14
	ADDQ $4, DX
	ADDQ $4, R13
	VBROADCASTSS X14, Y14
	MOVQ BX, R8

dqblock:
	VPMOVZXBD (SI), Y2        // 8 bytes -> 8 dwords, two codes each
	VPAND Y15, Y2, Y3         // codes 0,2,..,14
	VPSRLD $4, Y2, Y4         // codes 1,3,..,15
	VCVTDQ2PS Y3, Y3
	VCVTDQ2PS Y4, Y4
	VUNPCKLPS Y4, Y3, Y5      // 0,1,2,3 | 8,9,10,11
	VUNPCKHPS Y4, Y3, Y6      // 4,5,6,7 | 12,13,14,15
	VPERM2F128 $0x20, Y6, Y5, Y7  // 0..7
	VPERM2F128 $0x31, Y6, Y5, Y8  // 8..15
	VFMADD213PS Y14, Y13, Y7  // scale·code + bias
	VFMADD213PS Y14, Y13, Y8
	VMOVUPS Y7, (DI)
	VMOVUPS Y8, 32(DI)
	ADDQ $8, SI
	ADDQ $64, DI
	DECQ R8
	JNZ dqblock

	DECQ CX
	JNZ dqgroup

	VZEROUPPER
	RET

// func dequantQ4BF16(dst *float32, w *uint32, scales, biases unsafe.Pointer, groups, blocks int)
// dequantQ4F32 with 16-bit scales and biases.
TEXT ·dequantQ4BF16(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DI
	MOVQ w+8(FP), SI
	MOVQ scales+16(FP), DX
	MOVQ biases+24(FP), R13
	MOVQ groups+32(FP), CX
	MOVQ blocks+40(FP), BX
	MOVL $15, AX
	VMOVD AX, X15
	VPBROADCASTD X15, Y15

dqgroup:
	VPBROADCASTW (DX), Y13     // bf16: the 16 bits in the high half of each float32
	VPSLLD $16, Y13, Y13
	VPBROADCASTW (R13), X14
	VPSLLD $16, X14, X14
	ADDQ $2, DX
	ADDQ $2, R13
	VBROADCASTSS X14, Y14
	MOVQ BX, R8

dqblock:
	VPMOVZXBD (SI), Y2        // 8 bytes -> 8 dwords, two codes each
	VPAND Y15, Y2, Y3         // codes 0,2,..,14
	VPSRLD $4, Y2, Y4         // codes 1,3,..,15
	VCVTDQ2PS Y3, Y3
	VCVTDQ2PS Y4, Y4
	VUNPCKLPS Y4, Y3, Y5      // 0,1,2,3 | 8,9,10,11
	VUNPCKHPS Y4, Y3, Y6      // 4,5,6,7 | 12,13,14,15
	VPERM2F128 $0x20, Y6, Y5, Y7  // 0..7
	VPERM2F128 $0x31, Y6, Y5, Y8  // 8..15
	VFMADD213PS Y14, Y13, Y7  // scale·code + bias
	VFMADD213PS Y14, Y13, Y8
	VMOVUPS Y7, (DI)
	VMOVUPS Y8, 32(DI)
	ADDQ $8, SI
	ADDQ $64, DI
	DECQ R8
	JNZ dqblock

	DECQ CX
	JNZ dqgroup

	VZEROUPPER
	RET

// func dequantQ4F16(dst *float32, w *uint32, scales, biases unsafe.Pointer, groups, blocks int)
// dequantQ4F32 with 16-bit scales and biases.
TEXT ·dequantQ4F16(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DI
	MOVQ w+8(FP), SI
	MOVQ scales+16(FP), DX
	MOVQ biases+24(FP), R13
	MOVQ groups+32(FP), CX
	MOVQ blocks+40(FP), BX
	MOVL $15, AX
	VMOVD AX, X15
	VPBROADCASTD X15, Y15

dqgroup:
	VPBROADCASTW (DX), X13     // fp16: widened by F16C
	VCVTPH2PS X13, Y13
	VPBROADCASTW (R13), X14
	VCVTPH2PS X14, X14
	ADDQ $2, DX
	ADDQ $2, R13
	VBROADCASTSS X14, Y14
	MOVQ BX, R8

dqblock:
	VPMOVZXBD (SI), Y2        // 8 bytes -> 8 dwords, two codes each
	VPAND Y15, Y2, Y3         // codes 0,2,..,14
	VPSRLD $4, Y2, Y4         // codes 1,3,..,15
	VCVTDQ2PS Y3, Y3
	VCVTDQ2PS Y4, Y4
	VUNPCKLPS Y4, Y3, Y5      // 0,1,2,3 | 8,9,10,11
	VUNPCKHPS Y4, Y3, Y6      // 4,5,6,7 | 12,13,14,15
	VPERM2F128 $0x20, Y6, Y5, Y7  // 0..7
	VPERM2F128 $0x31, Y6, Y5, Y8  // 8..15
	VFMADD213PS Y14, Y13, Y7  // scale·code + bias
	VFMADD213PS Y14, Y13, Y8
	VMOVUPS Y7, (DI)
	VMOVUPS Y8, 32(DI)
	ADDQ $8, SI
	ADDQ $64, DI
	DECQ R8
	JNZ dqblock

	DECQ CX
	JNZ dqgroup

	VZEROUPPER
	RET

// func dequantQ8F32(dst *float32, w *uint32, scales, biases unsafe.Pointer, groups, blocks int)
// dst = scale·code + bias for groups groups of blocks runs of 8 8-bit codes, in order.
TEXT ·dequantQ8F32(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DI
	MOVQ w+8(FP), SI
	MOVQ scales+16(FP), DX
	MOVQ biases+24(FP), R13
	MOVQ groups+32(FP), CX
	MOVQ blocks+40(FP), BX
	SHRQ $1, BX               // two runs of 8 a step (groups are >= 32)

d8group:
	VBROADCASTSS (DX), Y13     // float32 scales and biases
	VMOVSS (R13), X14
	ADDQ $4, DX
	ADDQ $4, R13
	VBROADCASTSS X14, Y14
	MOVQ BX, R8

d8block:
	VPMOVZXBD (SI), Y2        // 8 codes
	VPMOVZXBD 8(SI), Y3
	VCVTDQ2PS Y2, Y2
	VCVTDQ2PS Y3, Y3
	VFMADD213PS Y14, Y13, Y2  // scale·code + bias
	VFMADD213PS Y14, Y13, Y3
	VMOVUPS Y2, (DI)
	VMOVUPS Y3, 32(DI)
	ADDQ $16, SI
	ADDQ $64, DI
	DECQ R8
	JNZ d8block

	DECQ CX
	JNZ d8group

	VZEROUPPER
	RET
// func dequantQ8BF16(dst *float32, w *uint32, scales, biases unsafe.Pointer, groups, blocks int)
// dst = scale·code + bias for groups groups of blocks runs of 8 8-bit codes, in order.
TEXT ·dequantQ8BF16(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DI
	MOVQ w+8(FP), SI
	MOVQ scales+16(FP), DX
	MOVQ biases+24(FP), R13
	MOVQ groups+32(FP), CX
	MOVQ blocks+40(FP), BX
	SHRQ $1, BX               // two runs of 8 a step (groups are >= 32)

d8group:
	VPBROADCASTW (DX), Y13     // bf16: the 16 bits in the high half of each float32
	VPSLLD $16, Y13, Y13
	VPBROADCASTW (R13), X14
	VPSLLD $16, X14, X14
	ADDQ $2, DX
	ADDQ $2, R13
	VBROADCASTSS X14, Y14
	MOVQ BX, R8

d8block:
	VPMOVZXBD (SI), Y2        // 8 codes
	VPMOVZXBD 8(SI), Y3
	VCVTDQ2PS Y2, Y2
	VCVTDQ2PS Y3, Y3
	VFMADD213PS Y14, Y13, Y2  // scale·code + bias
	VFMADD213PS Y14, Y13, Y3
	VMOVUPS Y2, (DI)
	VMOVUPS Y3, 32(DI)
	ADDQ $16, SI
	ADDQ $64, DI
	DECQ R8
	JNZ d8block

	DECQ CX
	JNZ d8group

	VZEROUPPER
	RET
// func dequantQ8F16(dst *float32, w *uint32, scales, biases unsafe.Pointer, groups, blocks int)
// dst = scale·code + bias for groups groups of blocks runs of 8 8-bit codes, in order.
TEXT ·dequantQ8F16(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DI
	MOVQ w+8(FP), SI
	MOVQ scales+16(FP), DX
	MOVQ biases+24(FP), R13
	MOVQ groups+32(FP), CX
	MOVQ blocks+40(FP), BX
	SHRQ $1, BX               // two runs of 8 a step (groups are >= 32)

d8group:
	VPBROADCASTW (DX), X13     // fp16: widened by F16C
	VCVTPH2PS X13, Y13
	VPBROADCASTW (R13), X14
	VCVTPH2PS X14, X14
	ADDQ $2, DX
	ADDQ $2, R13
	VBROADCASTSS X14, Y14
	MOVQ BX, R8

d8block:
	VPMOVZXBD (SI), Y2        // 8 codes
	VPMOVZXBD 8(SI), Y3
	VCVTDQ2PS Y2, Y2
	VCVTDQ2PS Y3, Y3
	VFMADD213PS Y14, Y13, Y2  // scale·code + bias
	VFMADD213PS Y14, Y13, Y3
	VMOVUPS Y2, (DI)
	VMOVUPS Y3, 32(DI)
	ADDQ $16, SI
	ADDQ $64, DI
	DECQ R8
	JNZ d8block

	DECQ CX
	JNZ d8group

	VZEROUPPER
	RET
