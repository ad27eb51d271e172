#include "textflag.h"

// Rounding of Vec8's inputs to 8-bit integers, AVX2 (Vec8.PrepareN): the same operations as
// its plain Go form, one group at a time, so the codes are bit-identical to it.

// func absMax(x *float32, n int) float32
// The largest |x[i]| of n values, n a multiple of 32.
TEXT ·absMax(SB), NOSPLIT, $0-20
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	MOVL $0x7fffffff, AX
	VMOVD AX, X7
	VPBROADCASTD X7, Y7
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3

absmax_loop:
	VANDPS (SI), Y7, Y4
	VMAXPS Y4, Y0, Y0
	VANDPS 32(SI), Y7, Y5
	VMAXPS Y5, Y1, Y1
	VANDPS 64(SI), Y7, Y4
	VMAXPS Y4, Y2, Y2
	VANDPS 96(SI), Y7, Y5
	VMAXPS Y5, Y3, Y3
	ADDQ $128, SI
	SUBQ $32, CX
	JNZ absmax_loop
	VMAXPS Y1, Y0, Y0
	VMAXPS Y3, Y2, Y2
	VMAXPS Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VMAXPS X1, X0, X0
	VPERMILPS $0x4e, X0, X1
	VMAXPS X1, X0, X0
	VPERMILPS $0xb1, X0, X1
	VMAXPS X1, X0, X0
	VZEROUPPER
	MOVSS X0, ret+16(FP)
	RET

// dword order that undoes VPACKSSDW/VPACKSSWB's interleaving of 128-bit lanes
DATA packOrder<>+0(SB)/4, $0
DATA packOrder<>+4(SB)/4, $4
DATA packOrder<>+8(SB)/4, $1
DATA packOrder<>+12(SB)/4, $5
DATA packOrder<>+16(SB)/4, $2
DATA packOrder<>+20(SB)/4, $6
DATA packOrder<>+24(SB)/4, $3
DATA packOrder<>+28(SB)/4, $7
GLOBL packOrder<>(SB), RODATA|NOPTR, $32

// per 128-bit lane: its 8 even bytes, then its 8 odd ones
DATA evenOdd<>+0(SB)/8, $0x0e0c0a0806040200
DATA evenOdd<>+8(SB)/8, $0x0f0d0b0907050301
DATA evenOdd<>+16(SB)/8, $0x0e0c0a0806040200
DATA evenOdd<>+24(SB)/8, $0x0f0d0b0907050301
GLOBL evenOdd<>(SB), RODATA|NOPTR, $32

// ROUND32 rounds the 32 values at off(SI) to clamped 8-bit codes, adds them to Y10 (int32
// lanes), and leaves in R their 16 even-numbered codes, then their 16 odd ones; A..C are scratch.
#define ROUND32(off, R, A, B, C) \
	VMULPS off(SI), Y15, R \
	VMULPS off+32(SI), Y15, A \
	VMULPS off+64(SI), Y15, B \
	VMULPS off+96(SI), Y15, C \
	VCVTPS2DQ R, R \
	VCVTPS2DQ A, A \
	VCVTPS2DQ B, B \
	VCVTPS2DQ C, C \
	VPMINSD Y14, R, R \
	VPMINSD Y14, A, A \
	VPMINSD Y14, B, B \
	VPMINSD Y14, C, C \
	VPMAXSD Y13, R, R \
	VPMAXSD Y13, A, A \
	VPMAXSD Y13, B, B \
	VPMAXSD Y13, C, C \
	VPADDD R, Y10, Y10 \
	VPADDD A, Y10, Y10 \
	VPADDD B, Y10, Y10 \
	VPADDD C, Y10, Y10 \
	VPACKSSDW A, R, R \
	VPACKSSDW C, B, B \
	VPACKSSWB B, R, R \
	VPERMD R, Y12, R \
	VPSHUFB Y11, R, R \
	VPERMQ $0xd8, R, R

// func round8(x *float32, chunks int, id float32, dst *int8, stride int) int32
// Rounds chunks·64 values to c = clamp(rint(x·id), -127, 127) (VCVTPS2DQ rounds half to
// even, as rint) and returns Σ c. Chunk j's codes go to dst+j·stride in Vec8's order: its 32
// even-numbered codes, then its 32 odd ones.
TEXT ·round8(SB), NOSPLIT, $0-44
	MOVQ x+0(FP), SI
	MOVQ chunks+8(FP), CX
	VBROADCASTSS id+16(FP), Y15
	MOVQ dst+24(FP), DI
	MOVQ stride+32(FP), DX
	MOVL $127, AX
	VMOVD AX, X14
	VPBROADCASTD X14, Y14
	MOVL $-127, AX
	VMOVD AX, X13
	VPBROADCASTD X13, Y13
	VMOVDQU packOrder<>(SB), Y12
	VMOVDQU evenOdd<>(SB), Y11
	VPXOR Y10, Y10, Y10

round8_chunk:
	ROUND32(0, Y0, Y1, Y2, Y3)
	ROUND32(128, Y4, Y5, Y6, Y7)
	VPERM2I128 $0x20, Y4, Y0, Y8
	VPERM2I128 $0x31, Y4, Y0, Y9
	VMOVDQU Y8, (DI)
	VMOVDQU Y9, 32(DI)
	ADDQ $256, SI
	ADDQ DX, DI
	DECQ CX
	JNZ round8_chunk
	VEXTRACTI128 $1, Y10, X0
	VPADDD X0, X10, X10
	VPSHUFD $0x4e, X10, X0
	VPADDD X0, X10, X10
	VPSHUFD $0xb1, X10, X0
	VPADDD X0, X10, X10
	VMOVD X10, AX
	MOVL AX, ret+40(FP)
	VZEROUPPER
	RET
