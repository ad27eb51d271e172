#include "textflag.h"
#include "fused_amd64.h"

// Decode attention straight from the cache's codes, two query heads per pass over a
// run of positions (rows cstride code bytes and hstride fp16 bytes apart): no
// dequantized row is written. An affine group's dot product is
// scale·Σq·code + bias·Σq, so keys cost one conversion per code, and values
// accumulate (p·scale)·code with Σp·bias added once per call. One head's rows lie
// kvHeads rows apart, a strided walk the hardware prefetcher follows poorly, so each
// position's row is prefetched 8 positions ahead.

// func kdot8x2(out, q, qs *float32, codes *byte, sb *uint16, n, cstride, hstride, groups, blocks int)
// out[2j+h] = Σ_g scale_g·(q_h·codes_g) + bias_g·qs[2g+h] for position j, 8-bit codes,
// q_h at q + h·dim floats, blocks runs of 16 codes a group.
TEXT ·kdot8x2(SB), NOSPLIT, $0-80
	MOVQ out+0(FP), DI
	MOVQ q+8(FP), R10
	MOVQ qs+16(FP), R11
	MOVQ codes+24(FP), SI
	MOVQ sb+32(FP), DX
	MOVQ n+40(FP), R8
	MOVQ cstride+48(FP), R12
	MOVQ hstride+56(FP), R13
	MOVQ groups+64(FP), AX
	IMULQ blocks+72(FP), AX
	SHLQ $6, AX              // dim·4 bytes: q_1's offset from q_0

k8pos:
	PREFETCHT0 (SI)(R12*8)   // the row 8 positions ahead
	PREFETCHT0 (DX)(R13*8)
	PREFETCHT0 64(SI)(R12*8)
	PREFETCHT0 127(SI)(R12*8)
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS X12, X12, X12
	MOVQ SI, CX
	MOVQ R10, R15
	XORQ BX, BX

k8group:
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11
	MOVQ blocks+72(FP), R9

k8block:
	VPMOVZXBD (CX), Y0
	VPMOVZXBD 8(CX), Y1
	VCVTDQ2PS Y0, Y0
	VCVTDQ2PS Y1, Y1
	VFMADD231PS (R15), Y0, Y6
	VFMADD231PS (R15)(AX*1), Y0, Y7
	VFMADD231PS 32(R15), Y1, Y10
	VFMADD231PS 32(R15)(AX*1), Y1, Y11
	ADDQ $16, CX
	ADDQ $64, R15
	DECQ R9
	JNZ k8block

	VADDPS Y10, Y6, Y6
	VADDPS Y11, Y7, Y7
	MOVL (DX)(BX*4), R9      // scale, bias as fp16
	VMOVD R9, X1
	VCVTPH2PS X1, X1
	VBROADCASTSS X1, Y2
	VFMADD231PS Y6, Y2, Y8
	VFMADD231PS Y7, Y2, Y9
	VMOVSHDUP X1, X1
	VBROADCASTSS X1, X1
	VMOVQ (R11)(BX*8), X3
	VFMADD231PS X3, X1, X12
	INCQ BX
	CMPQ BX, groups+64(FP)
	JLT k8group

	VHADDPS Y9, Y8, Y8
	VEXTRACTF128 $1, Y8, X4
	VADDPS X4, X8, X8
	VHADDPS X8, X8, X8
	VADDPS X12, X8, X8
	VMOVQ X8, (DI)
	ADDQ $8, DI
	ADDQ R12, SI
	ADDQ R13, DX
	DECQ R8
	JNZ k8pos
	VZEROUPPER
	RET

// func kdot4x2(out, q, qs *float32, codes *byte, sb *uint16, n, cstride, hstride, groups, blocks int, q40 bool)
// kdot8x2 for 4-bit codes, blocks runs of 16 codes (8 bytes) a group; each run of q
// is permuted as prepareQ does: its 8 even elements, then its 8 odd ones. With q40 the
// groups are q4_0's.
TEXT ·kdot4x2(SB), NOSPLIT, $0-81
	MOVQ out+0(FP), DI
	MOVQ q+8(FP), R10
	MOVQ qs+16(FP), R11
	MOVQ codes+24(FP), SI
	MOVQ sb+32(FP), DX
	MOVQ n+40(FP), R8
	MOVQ cstride+48(FP), R12
	MOVQ hstride+56(FP), R13
	MOVQ groups+64(FP), AX
	IMULQ blocks+72(FP), AX
	SHLQ $6, AX
	MOVL $15, BX
	VMOVD BX, X15
	VPBROADCASTD X15, Y15

k4pos:
	PREFETCHT0 (SI)(R12*8)   // the row 8 positions ahead
	PREFETCHT0 (DX)(R13*8)
	PREFETCHT0 64(SI)(R12*8)
	PREFETCHT0 127(SI)(R12*8)
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS X12, X12, X12
	MOVQ SI, CX
	MOVQ R10, R15
	XORQ BX, BX

k4group:
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11
	MOVQ blocks+72(FP), R9

k4block:
	VPMOVZXBD (CX), Y0       // 8 bytes, 16 codes
	VPAND Y15, Y0, Y1        // even elements
	VPSRLD $4, Y0, Y0        // odd elements
	VCVTDQ2PS Y1, Y1
	VCVTDQ2PS Y0, Y0
	VFMADD231PS (R15), Y1, Y6
	VFMADD231PS (R15)(AX*1), Y1, Y7
	VFMADD231PS 32(R15), Y0, Y10
	VFMADD231PS 32(R15)(AX*1), Y0, Y11
	ADDQ $8, CX
	ADDQ $64, R15
	DECQ R9
	JNZ k4block

	VADDPS Y10, Y6, Y6
	VADDPS Y11, Y7, Y7
	CMPB q40+80(FP), $0
	JNE k4q40
	MOVL (DX)(BX*4), R9
	VMOVD R9, X1
	VCVTPH2PS X1, X1
	JMP k4sb

k4q40:
	Q40SB((DX)(BX*2), R9, X1)

k4sb:
	VBROADCASTSS X1, Y2
	VFMADD231PS Y6, Y2, Y8
	VFMADD231PS Y7, Y2, Y9
	VMOVSHDUP X1, X1
	VBROADCASTSS X1, X1
	VMOVQ (R11)(BX*8), X3
	VFMADD231PS X3, X1, X12
	INCQ BX
	CMPQ BX, groups+64(FP)
	JLT k4group

	VHADDPS Y9, Y8, Y8
	VEXTRACTF128 $1, Y8, X4
	VADDPS X4, X8, X8
	VHADDPS X8, X8, X8
	VADDPS X12, X8, X8
	VMOVQ X8, (DI)
	ADDQ $8, DI
	ADDQ R12, SI
	ADDQ R13, DX
	DECQ R8
	JNZ k4pos
	VZEROUPPER
	RET

// VSB loads position j's fp16 (scale, bias) at (DX) into X1. VCOEF takes them and the
// weights (p_0, p_1) at (R10): X12 += bias·(p_0, p_1), Y13 = p_0·scale, Y14 = p_1·scale.
#define VSB \
	MOVL (DX), BX; \
	VMOVD BX, X1; \
	VCVTPH2PS X1, X1

#define VCOEF \
	VMOVQ (R10), X2; \
	VMOVSHDUP X1, X0; \
	VBROADCASTSS X0, X0; \
	VFMADD231PS X2, X0, X12; \
	VBROADCASTSS X1, X3; \
	VMULPS X2, X3, X3; \
	VBROADCASTSS X3, Y13; \
	VMOVSHDUP X3, X0; \
	VBROADCASTSS X0, Y14

// VCOEF6 is VCOEF in X0, X1 and X14 alone, leaving Y2 and Y3 to vacc6x2's shuffles.
#define VCOEF6 \
	VMOVQ (R10), X0; \
	VMOVSHDUP X1, X14; \
	VBROADCASTSS X14, X14; \
	VFMADD231PS X0, X14, X12; \
	VBROADCASTSS X1, X1; \
	VMULPS X0, X1, X1; \
	VBROADCASTSS X1, Y13; \
	VMOVSHDUP X1, X1; \
	VBROADCASTSS X1, Y14

// vstore adds the bias sums and the registers to 32 floats at (DI) (head 0, Y4-Y7)
// and (R9) (head 1, Y8-Y11).
#define VSTORE \
	VBROADCASTSS X12, Y13; \
	VMOVSHDUP X12, X0; \
	VBROADCASTSS X0, Y14; \
	VADDPS (DI), Y13, Y0; \
	VADDPS Y4, Y0, Y0; \
	VMOVUPS Y0, (DI); \
	VADDPS 32(DI), Y13, Y0; \
	VADDPS Y5, Y0, Y0; \
	VMOVUPS Y0, 32(DI); \
	VADDPS 64(DI), Y13, Y0; \
	VADDPS Y6, Y0, Y0; \
	VMOVUPS Y0, 64(DI); \
	VADDPS 96(DI), Y13, Y0; \
	VADDPS Y7, Y0, Y0; \
	VMOVUPS Y0, 96(DI); \
	VADDPS (R9), Y14, Y0; \
	VADDPS Y8, Y0, Y0; \
	VMOVUPS Y0, (R9); \
	VADDPS 32(R9), Y14, Y0; \
	VADDPS Y9, Y0, Y0; \
	VMOVUPS Y0, 32(R9); \
	VADDPS 64(R9), Y14, Y0; \
	VADDPS Y10, Y0, Y0; \
	VMOVUPS Y0, 64(R9); \
	VADDPS 96(R9), Y14, Y0; \
	VADDPS Y11, Y0, Y0; \
	VMOVUPS Y0, 96(R9)

#define VZERO \
	VXORPS Y4, Y4, Y4; \
	VXORPS Y5, Y5, Y5; \
	VXORPS Y6, Y6, Y6; \
	VXORPS Y7, Y7, Y7; \
	VXORPS Y8, Y8, Y8; \
	VXORPS Y9, Y9, Y9; \
	VXORPS Y10, Y10, Y10; \
	VXORPS Y11, Y11, Y11; \
	VXORPS X12, X12, X12

// func vacc8x2(acc0, acc1, p *float32, codes *byte, sb *uint16, n, cstride, hstride int)
// acc_h[d] += Σ_j p[2j+h]·(scale_j·code_j[d] + bias_j) over one group's run of 32
// 8-bit codes (d < 32) at n positions.
TEXT ·vacc8x2(SB), NOSPLIT, $0-64
	MOVQ acc0+0(FP), DI
	MOVQ acc1+8(FP), R9
	MOVQ p+16(FP), R10
	MOVQ codes+24(FP), SI
	MOVQ sb+32(FP), DX
	MOVQ n+40(FP), R8
	MOVQ cstride+48(FP), R12
	MOVQ hstride+56(FP), R13
	VZERO

v8pos:
	PREFETCHT0 (SI)(R12*8)   // the run 8 positions ahead
	PREFETCHT0 31(SI)(R12*8)
	PREFETCHT0 (DX)(R13*8)
	VSB
	VCOEF
	VPMOVZXBD (SI), Y0
	VCVTDQ2PS Y0, Y0
	VFMADD231PS Y0, Y13, Y4
	VFMADD231PS Y0, Y14, Y8
	VPMOVZXBD 8(SI), Y1
	VCVTDQ2PS Y1, Y1
	VFMADD231PS Y1, Y13, Y5
	VFMADD231PS Y1, Y14, Y9
	VPMOVZXBD 16(SI), Y0
	VCVTDQ2PS Y0, Y0
	VFMADD231PS Y0, Y13, Y6
	VFMADD231PS Y0, Y14, Y10
	VPMOVZXBD 24(SI), Y1
	VCVTDQ2PS Y1, Y1
	VFMADD231PS Y1, Y13, Y7
	VFMADD231PS Y1, Y14, Y11
	ADDQ $8, R10
	ADDQ R12, SI
	ADDQ R13, DX
	DECQ R8
	JNZ v8pos

	VSTORE
	VZEROUPPER
	RET

// func vacc4x2(acc0, acc1, p *float32, codes *byte, sb *uint16, n, cstride, hstride int, q40 bool)
// vacc8x2 for 4-bit codes (16 bytes a run of 32), of q4_0 with q40. The registers hold
// even and odd elements apart; they are interleaved back before the store.
TEXT ·vacc4x2(SB), NOSPLIT, $0-65
	MOVQ acc0+0(FP), DI
	MOVQ acc1+8(FP), R9
	MOVQ p+16(FP), R10
	MOVQ codes+24(FP), SI
	MOVQ sb+32(FP), DX
	MOVQ n+40(FP), R8
	MOVQ cstride+48(FP), R12
	MOVQ hstride+56(FP), R13
	MOVL $15, BX
	VMOVD BX, X15
	VPBROADCASTD X15, Y15
	VZERO

v4pos:
	PREFETCHT0 (SI)(R12*8)   // the run 8 positions ahead
	PREFETCHT0 15(SI)(R12*8)
	PREFETCHT0 (DX)(R13*8)
	CMPB q40+64(FP), $0
	JNE v4q40
	VSB
	JMP v4coef

v4q40:
	Q40SB((DX), BX, X1)

v4coef:
	VCOEF
	VPMOVZXBD (SI), Y0       // elements 0..15
	VPAND Y15, Y0, Y1
	VPSRLD $4, Y0, Y0
	VCVTDQ2PS Y1, Y1
	VCVTDQ2PS Y0, Y0
	VFMADD231PS Y1, Y13, Y4  // even
	VFMADD231PS Y0, Y13, Y5  // odd
	VFMADD231PS Y1, Y14, Y8
	VFMADD231PS Y0, Y14, Y9
	VPMOVZXBD 8(SI), Y0      // elements 16..31
	VPAND Y15, Y0, Y1
	VPSRLD $4, Y0, Y0
	VCVTDQ2PS Y1, Y1
	VCVTDQ2PS Y0, Y0
	VFMADD231PS Y1, Y13, Y6
	VFMADD231PS Y0, Y13, Y7
	VFMADD231PS Y1, Y14, Y10
	VFMADD231PS Y0, Y14, Y11
	ADDQ $8, R10
	ADDQ R12, SI
	ADDQ R13, DX
	DECQ R8
	JNZ v4pos

	// (even, odd) -> in order: unpack within lanes, then swap the lane halves.
	EVENODD(Y4, Y5, Y0, Y1)
	EVENODD(Y6, Y7, Y0, Y1)
	EVENODD(Y8, Y9, Y0, Y1)
	EVENODD(Y10, Y11, Y0, Y1)
	VSTORE
	VZEROUPPER
	RET

// func scaleMax2(sc *float32, n int, scale float32, mx *[2]float32)
// sc[i] *= scale over n positions of two interleaved heads (n a multiple of 4), and
// mx[h] = max(mx[h], the head's scaled scores).
TEXT ·scaleMax2(SB), NOSPLIT, $0-32
	MOVQ sc+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSS scale+16(FP), Y1
	MOVQ mx+24(FP), DI
	VMOVQ (DI), X2
	VMOVDDUP X2, X2
	VINSERTF128 $1, X2, Y2, Y2
	SHRQ $2, CX

smloop:
	VMULPS (SI), Y1, Y0
	VMOVUPS Y0, (SI)
	VMAXPS Y0, Y2, Y2
	ADDQ $32, SI
	DECQ CX
	JNZ smloop

	VEXTRACTF128 $1, Y2, X3
	VMAXPS X3, X2, X2
	VPERMILPS $0x4E, X2, X3
	VMAXPS X3, X2, X2
	VMOVQ X2, (DI)
	VZEROUPPER
	RET

// EXPNEG sets Y4 = expNeg(Y0 - Y15) lane by lane, with expNeg's operations in its order
// (no fused multiply-add), from expTable's constants at (R8); it uses Y1-Y3 and Y14.
#define EXPNEG \
	VSUBPS Y15, Y0, Y0; \
	VCMPPS $5, (R8), Y0, Y14; \
	VMULPS 32(R8), Y0, Y1; \
	VADDPS 64(R8), Y1, Y1; \
	VSUBPS 64(R8), Y1, Y2; \
	VMULPS 96(R8), Y2, Y3; \
	VSUBPS Y3, Y0, Y3; \
	VMULPS 128(R8), Y2, Y2; \
	VSUBPS Y2, Y3, Y3; \
	VMULPS Y3, Y3, Y2; \
	VMULPS 224(R8), Y3, Y4; \
	VADDPS 256(R8), Y4, Y4; \
	VMULPS 288(R8), Y2, Y0; \
	VADDPS Y0, Y4, Y4; \
	VMULPS Y2, Y4, Y4; \
	VMULPS 160(R8), Y3, Y0; \
	VADDPS 192(R8), Y0, Y0; \
	VADDPS Y0, Y4, Y4; \
	VMULPS Y2, Y4, Y4; \
	VADDPS Y3, Y4, Y4; \
	VADDPS 320(R8), Y4, Y4; \
	VPADDD 352(R8), Y1, Y1; \
	VPSLLD $23, Y1, Y1; \
	VMULPS Y1, Y4, Y4; \
	VANDPS Y14, Y4, Y4

// func expSum2(p, sc *float32, n int, mx, sum *[2]float32, t *[12][8]uint32)
// p[2j+h] = expNeg(sc[2j+h] - mx[h]) over n positions (a multiple of 4), with expNeg's
// operations in its order (no fused multiply-add), and sum[h] = the head's Σp. t holds
// expNeg's constants, 8 copies each (expTable).
TEXT ·expSum2(SB), NOSPLIT, $0-48
	MOVQ p+0(FP), DI
	MOVQ sc+8(FP), SI
	MOVQ n+16(FP), CX
	MOVQ mx+24(FP), DX
	MOVQ t+40(FP), R8
	VMOVQ (DX), X15
	VMOVDDUP X15, X15
	VINSERTF128 $1, X15, Y15, Y15
	VXORPS Y13, Y13, Y13
	SHRQ $2, CX

exloop:
	VMOVUPS (SI), Y0
	EXPNEG
	VMOVUPS Y4, (DI)
	VADDPS Y4, Y13, Y13
	ADDQ $32, SI
	ADDQ $32, DI
	DECQ CX
	JNZ exloop

	MOVQ sum+32(FP), DX
	VEXTRACTF128 $1, Y13, X3
	VADDPS X3, X13, X13
	VPERMILPS $0x4E, X13, X3
	VADDPS X3, X13, X13
	VMOVQ X13, (DX)
	VZEROUPPER
	RET

// func scaleMax8(sc *float32, n int, scale float32, mx *[8]float32)
// scaleMax2 for 8 lanes (the group kernels' heads): sc[i] *= scale over n positions of 8
// floats (n > 0), and mx[h] = max(mx[h], lane h's scaled scores).
TEXT ·scaleMax8(SB), NOSPLIT, $0-32
	MOVQ sc+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSS scale+16(FP), Y1
	MOVQ mx+24(FP), DI
	VMOVUPS (DI), Y2

sm8loop:
	VMULPS (SI), Y1, Y0
	VMOVUPS Y0, (SI)
	VMAXPS Y0, Y2, Y2
	ADDQ $32, SI
	DECQ CX
	JNZ sm8loop

	VMOVUPS Y2, (DI)
	VZEROUPPER
	RET

// func expSum8(p, sc *float32, n int, mx, sum *[8]float32, t *[12][8]uint32)
// expSum2 for 8 lanes: p[8j+h] = expNeg(sc[8j+h] - mx[h]) over n positions (n > 0), and
// sum[h] = lane h's Σp.
TEXT ·expSum8(SB), NOSPLIT, $0-48
	MOVQ p+0(FP), DI
	MOVQ sc+8(FP), SI
	MOVQ n+16(FP), CX
	MOVQ mx+24(FP), DX
	MOVQ t+40(FP), R8
	VMOVUPS (DX), Y15
	VXORPS Y13, Y13, Y13

ex8loop:
	VMOVUPS (SI), Y0
	EXPNEG
	VMOVUPS Y4, (DI)
	VADDPS Y4, Y13, Y13
	ADDQ $32, SI
	ADDQ $32, DI
	DECQ CX
	JNZ ex8loop

	MOVQ sum+32(FP), DX
	VMOVUPS Y13, (DX)
	VZEROUPPER
	RET

// func kdot6x2(out, q, qs *float32, codes *byte, sb *uint16, n, cstride, hstride, groups, blocks int)
// kdot8x2 for 6-bit codes, blocks runs of 16 codes (12 bytes) a group, converted by
// UNPACK6 as code·2^s: each run of q comes scaled by 2^-s lane by lane (prepareQ).
TEXT ·kdot6x2(SB), NOSPLIT, $0-80
	MOVQ out+0(FP), DI
	MOVQ q+8(FP), R10
	MOVQ qs+16(FP), R11
	MOVQ codes+24(FP), SI
	MOVQ sb+32(FP), DX
	MOVQ n+40(FP), R8
	MOVQ cstride+48(FP), R12
	MOVQ hstride+56(FP), R13
	MOVQ groups+64(FP), AX
	IMULQ blocks+72(FP), AX
	SHLQ $6, AX
	VMOVDQU c6lo<>(SB), Y13
	VMOVDQU c6hi<>(SB), Y14
	VMOVDQU c6mask<>(SB), Y15

k6pos:
	PREFETCHT0 (SI)(R12*8)   // the row 8 positions ahead
	PREFETCHT0 (DX)(R13*8)
	PREFETCHT0 64(SI)(R12*8)
	PREFETCHT0 95(SI)(R12*8)
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS X12, X12, X12
	MOVQ SI, CX
	MOVQ R10, R15
	XORQ BX, BX

k6group:
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11
	MOVQ blocks+72(FP), R9

k6block:
	UNPACK6((CX), 4(CX), Y0, Y1, Y13, Y14, Y15)
	VFMADD231PS (R15), Y0, Y6
	VFMADD231PS (R15)(AX*1), Y0, Y7
	VFMADD231PS 32(R15), Y1, Y10
	VFMADD231PS 32(R15)(AX*1), Y1, Y11
	ADDQ $12, CX
	ADDQ $64, R15
	DECQ R9
	JNZ k6block

	VADDPS Y10, Y6, Y6
	VADDPS Y11, Y7, Y7
	MOVL (DX)(BX*4), R9      // scale, bias as fp16
	VMOVD R9, X1
	VCVTPH2PS X1, X1
	VBROADCASTSS X1, Y2
	VFMADD231PS Y6, Y2, Y8
	VFMADD231PS Y7, Y2, Y9
	VMOVSHDUP X1, X1
	VBROADCASTSS X1, X1
	VMOVQ (R11)(BX*8), X3
	VFMADD231PS X3, X1, X12
	INCQ BX
	CMPQ BX, groups+64(FP)
	JLT k6group

	VHADDPS Y9, Y8, Y8
	VEXTRACTF128 $1, Y8, X4
	VADDPS X4, X8, X8
	VHADDPS X8, X8, X8
	VADDPS X12, X8, X8
	VMOVQ X8, (DI)
	ADDQ $8, DI
	ADDQ R12, SI
	ADDQ R13, DX
	DECQ R8
	JNZ k6pos
	VZEROUPPER
	RET

// func vacc6x2(acc0, acc1, p *float32, codes *byte, sb *uint16, n, cstride, hstride int)
// vacc8x2 for 6-bit codes (24 bytes a run of 32): the registers sum code·2^s, scaled
// back by 2^-s (c6down) before the store.
TEXT ·vacc6x2(SB), NOSPLIT, $0-64
	MOVQ acc0+0(FP), DI
	MOVQ acc1+8(FP), R9
	MOVQ p+16(FP), R10
	MOVQ codes+24(FP), SI
	MOVQ sb+32(FP), DX
	MOVQ n+40(FP), R8
	MOVQ cstride+48(FP), R12
	MOVQ hstride+56(FP), R13
	VMOVDQU c6lo<>(SB), Y2
	VMOVDQU c6hi<>(SB), Y3
	VMOVDQU c6mask<>(SB), Y15
	VZERO

v6pos:
	PREFETCHT0 (SI)(R12*8)   // the run 8 positions ahead
	PREFETCHT0 23(SI)(R12*8)
	PREFETCHT0 (DX)(R13*8)
	VSB
	VCOEF6
	UNPACK6((SI), 4(SI), Y0, Y1, Y2, Y3, Y15)     // elements 0..15
	VFMADD231PS Y0, Y13, Y4
	VFMADD231PS Y0, Y14, Y8
	VFMADD231PS Y1, Y13, Y5
	VFMADD231PS Y1, Y14, Y9
	UNPACK6(12(SI), 16(SI), Y0, Y1, Y2, Y3, Y15)  // elements 16..31
	VFMADD231PS Y0, Y13, Y6
	VFMADD231PS Y0, Y14, Y10
	VFMADD231PS Y1, Y13, Y7
	VFMADD231PS Y1, Y14, Y11
	ADDQ $8, R10
	ADDQ R12, SI
	ADDQ R13, DX
	DECQ R8
	JNZ v6pos

	VMOVUPS c6down<>(SB), Y15
	VMULPS Y15, Y4, Y4
	VMULPS Y15, Y5, Y5
	VMULPS Y15, Y6, Y6
	VMULPS Y15, Y7, Y7
	VMULPS Y15, Y8, Y8
	VMULPS Y15, Y9, Y9
	VMULPS Y15, Y10, Y10
	VMULPS Y15, Y11, Y11
	VSTORE
	VZEROUPPER
	RET
