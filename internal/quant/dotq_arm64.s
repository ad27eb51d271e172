#include "textflag.h"

// NEON versions of the decode kernels of dotq_amd64.s (see there): each 32-bit word's codes
// are isolated in place with an AND (the last one with a shift), converted exactly as
// q·2^(bits·j) and multiplied by inputs Vec.Prepare scaled by 2^(-bits·j). Vectors have 4
// lanes: a chunk is 4 words (32 4-bit or 16 8-bit codes), two chunks per iteration. The
// arithmetic of one row is fixed, whatever the call (the batching invariant):
//   per chunk c:  e = fma chain over the even j from 0, o over the odd j, a = e+o,
//                 tot[c&1] = fma(a, the chunk's scale, tot[c&1])
//   bias term:    bv = Σ over runs of 4 groups of fma(biases, sums) lane-wise, then bs = Σ
//                 over the remaining groups of fma(bias, sum) in order
//   result:       pairwise((tot0+tot1)+bv) + bs
//
// Go's assembler lacks UCVTF, FADD, FADDP, FCVTL and SHLL on vectors: they are encoded here.

#define UCVTF(n, d) WORD $(0x6E21D800 | ((n)<<5) | (d))
#define FADD(n, m, d) WORD $(0x4E20D400 | ((m)<<16) | ((n)<<5) | (d))
#define FADDPV(n, m, d) WORD $(0x6E20D400 | ((m)<<16) | ((n)<<5) | (d))
#define FADDPS(n, d) WORD $(0x7E30D800 | ((n)<<5) | (d))
#define FCVTL(n, d) WORD $(0x0E217800 | ((n)<<5) | (d))
#define SHLL16(n, d) WORD $(0x2E613800 | ((n)<<5) | (d))

#define Q4NPAIR \
	VLD1.P 32(R1), [V0.S4, V1.S4] \
	VLD1.P 64(R11), [V19.S4, V20.S4, V21.S4, V22.S4] \
	VLD1.P 64(R13), [V23.S4, V24.S4, V25.S4, V26.S4] \
	VEOR V4.B16, V4.B16, V4.B16 \
	VEOR V5.B16, V5.B16, V5.B16 \
	VEOR V6.B16, V6.B16, V6.B16 \
	VEOR V7.B16, V7.B16, V7.B16 \
	VAND V10.B16, V0.B16, V2.B16 \
	VAND V10.B16, V1.B16, V3.B16 \
	UCVTF(2, 2) \
	UCVTF(3, 3) \
	VFMLA V19.S4, V2.S4, V4.S4 \
	VFMLA V23.S4, V3.S4, V6.S4 \
	VAND V11.B16, V0.B16, V2.B16 \
	VAND V11.B16, V1.B16, V3.B16 \
	UCVTF(2, 2) \
	UCVTF(3, 3) \
	VFMLA V20.S4, V2.S4, V5.S4 \
	VFMLA V24.S4, V3.S4, V7.S4 \
	VAND V12.B16, V0.B16, V2.B16 \
	VAND V12.B16, V1.B16, V3.B16 \
	UCVTF(2, 2) \
	UCVTF(3, 3) \
	VFMLA V21.S4, V2.S4, V4.S4 \
	VFMLA V25.S4, V3.S4, V6.S4 \
	VAND V13.B16, V0.B16, V2.B16 \
	VAND V13.B16, V1.B16, V3.B16 \
	UCVTF(2, 2) \
	UCVTF(3, 3) \
	VFMLA V22.S4, V2.S4, V5.S4 \
	VFMLA V26.S4, V3.S4, V7.S4 \
	VLD1.P 64(R11), [V19.S4, V20.S4, V21.S4, V22.S4] \
	VLD1.P 64(R13), [V23.S4, V24.S4, V25.S4, V26.S4] \
	VAND V14.B16, V0.B16, V2.B16 \
	VAND V14.B16, V1.B16, V3.B16 \
	UCVTF(2, 2) \
	UCVTF(3, 3) \
	VFMLA V19.S4, V2.S4, V4.S4 \
	VFMLA V23.S4, V3.S4, V6.S4 \
	VAND V15.B16, V0.B16, V2.B16 \
	VAND V15.B16, V1.B16, V3.B16 \
	UCVTF(2, 2) \
	UCVTF(3, 3) \
	VFMLA V20.S4, V2.S4, V5.S4 \
	VFMLA V24.S4, V3.S4, V7.S4 \
	VAND V16.B16, V0.B16, V2.B16 \
	VAND V16.B16, V1.B16, V3.B16 \
	UCVTF(2, 2) \
	UCVTF(3, 3) \
	VFMLA V21.S4, V2.S4, V4.S4 \
	VFMLA V25.S4, V3.S4, V6.S4 \
	VUSHR $28, V0.S4, V2.S4 \
	VUSHR $28, V1.S4, V3.S4 \
	UCVTF(2, 2) \
	UCVTF(3, 3) \
	VFMLA V22.S4, V2.S4, V5.S4 \
	VFMLA V26.S4, V3.S4, V7.S4 \
	FADD(4, 5, 4) \
	FADD(6, 7, 6) \
	LSR R7, R9, R3 \
	SCALE \
	VFMLA V17.S4, V4.S4, V8.S4 \
	ADD $32, R9, R5 \
	LSR R7, R5, R3 \
	SCALE \
	VFMLA V17.S4, V6.S4, V9.S4 \
	ADD $128, R11 \
	ADD $128, R13 \
	ADD $64, R9

#define Q4NONE \
	VLD1.P 16(R1), [V0.S4] \
	VLD1.P 64(R11), [V19.S4, V20.S4, V21.S4, V22.S4] \
	VEOR V4.B16, V4.B16, V4.B16 \
	VEOR V5.B16, V5.B16, V5.B16 \
	VAND V10.B16, V0.B16, V2.B16 \
	UCVTF(2, 2) \
	VFMLA V19.S4, V2.S4, V4.S4 \
	VAND V11.B16, V0.B16, V2.B16 \
	UCVTF(2, 2) \
	VFMLA V20.S4, V2.S4, V5.S4 \
	VAND V12.B16, V0.B16, V2.B16 \
	UCVTF(2, 2) \
	VFMLA V21.S4, V2.S4, V4.S4 \
	VAND V13.B16, V0.B16, V2.B16 \
	UCVTF(2, 2) \
	VFMLA V22.S4, V2.S4, V5.S4 \
	VLD1.P 64(R11), [V19.S4, V20.S4, V21.S4, V22.S4] \
	VAND V14.B16, V0.B16, V2.B16 \
	UCVTF(2, 2) \
	VFMLA V19.S4, V2.S4, V4.S4 \
	VAND V15.B16, V0.B16, V2.B16 \
	UCVTF(2, 2) \
	VFMLA V20.S4, V2.S4, V5.S4 \
	VAND V16.B16, V0.B16, V2.B16 \
	UCVTF(2, 2) \
	VFMLA V21.S4, V2.S4, V4.S4 \
	VUSHR $28, V0.S4, V2.S4 \
	UCVTF(2, 2) \
	VFMLA V22.S4, V2.S4, V5.S4 \
	FADD(4, 5, 4) \
	LSR R7, R9, R3 \
	SCALE \
	VFMLA V17.S4, V4.S4, V8.S4

#define Q8NPAIR \
	VLD1.P 32(R1), [V0.S4, V1.S4] \
	VLD1.P 64(R11), [V19.S4, V20.S4, V21.S4, V22.S4] \
	VLD1.P 64(R13), [V23.S4, V24.S4, V25.S4, V26.S4] \
	VEOR V4.B16, V4.B16, V4.B16 \
	VEOR V5.B16, V5.B16, V5.B16 \
	VEOR V6.B16, V6.B16, V6.B16 \
	VEOR V7.B16, V7.B16, V7.B16 \
	VAND V10.B16, V0.B16, V2.B16 \
	VAND V10.B16, V1.B16, V3.B16 \
	UCVTF(2, 2) \
	UCVTF(3, 3) \
	VFMLA V19.S4, V2.S4, V4.S4 \
	VFMLA V23.S4, V3.S4, V6.S4 \
	VAND V11.B16, V0.B16, V2.B16 \
	VAND V11.B16, V1.B16, V3.B16 \
	UCVTF(2, 2) \
	UCVTF(3, 3) \
	VFMLA V20.S4, V2.S4, V5.S4 \
	VFMLA V24.S4, V3.S4, V7.S4 \
	VAND V12.B16, V0.B16, V2.B16 \
	VAND V12.B16, V1.B16, V3.B16 \
	UCVTF(2, 2) \
	UCVTF(3, 3) \
	VFMLA V21.S4, V2.S4, V4.S4 \
	VFMLA V25.S4, V3.S4, V6.S4 \
	VUSHR $24, V0.S4, V2.S4 \
	VUSHR $24, V1.S4, V3.S4 \
	UCVTF(2, 2) \
	UCVTF(3, 3) \
	VFMLA V22.S4, V2.S4, V5.S4 \
	VFMLA V26.S4, V3.S4, V7.S4 \
	FADD(4, 5, 4) \
	FADD(6, 7, 6) \
	LSR R7, R9, R3 \
	SCALE \
	VFMLA V17.S4, V4.S4, V8.S4 \
	ADD $16, R9, R5 \
	LSR R7, R5, R3 \
	SCALE \
	VFMLA V17.S4, V6.S4, V9.S4 \
	ADD $64, R11 \
	ADD $64, R13 \
	ADD $32, R9

#define Q8NONE \
	VLD1.P 16(R1), [V0.S4] \
	VLD1.P 64(R11), [V19.S4, V20.S4, V21.S4, V22.S4] \
	VEOR V4.B16, V4.B16, V4.B16 \
	VEOR V5.B16, V5.B16, V5.B16 \
	VAND V10.B16, V0.B16, V2.B16 \
	UCVTF(2, 2) \
	VFMLA V19.S4, V2.S4, V4.S4 \
	VAND V11.B16, V0.B16, V2.B16 \
	UCVTF(2, 2) \
	VFMLA V20.S4, V2.S4, V5.S4 \
	VAND V12.B16, V0.B16, V2.B16 \
	UCVTF(2, 2) \
	VFMLA V21.S4, V2.S4, V4.S4 \
	VUSHR $24, V0.S4, V2.S4 \
	UCVTF(2, 2) \
	VFMLA V22.S4, V2.S4, V5.S4 \
	FADD(4, 5, 4) \
	LSR R7, R9, R3 \
	SCALE \
	VFMLA V17.S4, V4.S4, V8.S4

#define BIASN \
	MOVD R6, R10 \
	MOVD sums+32(FP), R12 \
	VEOR V20.B16, V20.B16, V20.B16 \
	LSR $2, R20, R16 \
	CBZ R16, brem \
bvec: \
	BIAS4 \
	VLD1.P 16(R12), [V22.S4] \
	VFMLA V22.S4, V21.S4, V20.S4 \
	SUBS $1, R16, R16 \
	BNE bvec \
brem: \
	VEOR V23.B16, V23.B16, V23.B16 \
	AND $3, R20, R16 \
	CBZ R16, hsum \
bone: \
	BIAS1 \
	FMOVS.P 4(R12), F22 \
	FMADDS F22, F23, F21, F23 \
	SUBS $1, R16, R16 \
	BNE bone \
hsum: \
	FADD(8, 9, 8) \
	FADD(8, 20, 8) \
	FADDPV(8, 8, 8) \
	FADDPS(8, 0) \
	FADDS F23, F0, F0 \
	FMOVS.P F0, 4(R8)

#define Q4NBODY \
	MOVD x+0(FP), R0 \
	MOVD w+8(FP), R1 \
	MOVD scales+16(FP), R2 \
	MOVD biases+24(FP), R6 \
	MOVD out+40(FP), R8 \
	MOVD rows+48(FP), R14 \
	MOVD chunks+56(FP), R17 \
	MOVD groups+64(FP), R20 \
	MOVD srow+72(FP), R19 \
	MOVD gshift+80(FP), R7 \
	MOVW $0x0000000f, R5 \
	VDUP R5, V10.S4 \
	MOVW $0x000000f0, R5 \
	VDUP R5, V11.S4 \
	MOVW $0x00000f00, R5 \
	VDUP R5, V12.S4 \
	MOVW $0x0000f000, R5 \
	VDUP R5, V13.S4 \
	MOVW $0x000f0000, R5 \
	VDUP R5, V14.S4 \
	MOVW $0x00f00000, R5 \
	VDUP R5, V15.S4 \
	MOVW $0x0f000000, R5 \
	VDUP R5, V16.S4 \
row: \
	MOVD R0, R11 \
	ADD $128, R0, R13 \
	MOVD $0, R9 \
	VEOR V8.B16, V8.B16, V8.B16 \
	VEOR V9.B16, V9.B16, V9.B16 \
	LSR $1, R17, R15 \
	CBZ R15, tail \
pair: \
	Q4NPAIR \
	SUBS $1, R15, R15 \
	BNE pair \
tail: \
	TBZ $0, R17, bias \
	Q4NONE \
bias: \
	BIASN \
	ADD R19, R2, R2 \
	ADD R19, R6, R6 \
	SUBS $1, R14, R14 \
	BNE row \
	RET

#define Q8NBODY \
	MOVD x+0(FP), R0 \
	MOVD w+8(FP), R1 \
	MOVD scales+16(FP), R2 \
	MOVD biases+24(FP), R6 \
	MOVD out+40(FP), R8 \
	MOVD rows+48(FP), R14 \
	MOVD chunks+56(FP), R17 \
	MOVD groups+64(FP), R20 \
	MOVD srow+72(FP), R19 \
	MOVD gshift+80(FP), R7 \
	MOVW $0x000000ff, R5 \
	VDUP R5, V10.S4 \
	MOVW $0x0000ff00, R5 \
	VDUP R5, V11.S4 \
	MOVW $0x00ff0000, R5 \
	VDUP R5, V12.S4 \
row: \
	MOVD R0, R11 \
	ADD $64, R0, R13 \
	MOVD $0, R9 \
	VEOR V8.B16, V8.B16, V8.B16 \
	VEOR V9.B16, V9.B16, V9.B16 \
	LSR $1, R17, R15 \
	CBZ R15, tail \
pair: \
	Q8NPAIR \
	SUBS $1, R15, R15 \
	BNE pair \
tail: \
	TBZ $0, R17, bias \
	Q8NONE \
bias: \
	BIASN \
	ADD R19, R2, R2 \
	ADD R19, R6, R6 \
	SUBS $1, R14, R14 \
	BNE row \
	RET

#define SCALE ADD R3<<2, R2, R4; VLD1R (R4), [V17.S4]
#define BIAS4 VLD1.P 16(R10), [V21.S4]
#define BIAS1 FMOVS.P 4(R10), F21

// func dotQ4NF32(x *float32, w *uint32, scales, biases unsafe.Pointer, sums, out *float32, rows, chunks, groups, srow, gshift int)
TEXT ·dotQ4NF32(SB), NOSPLIT, $0-88
	Q4NBODY

// func dotQ8NF32(x *float32, w *uint32, scales, biases unsafe.Pointer, sums, out *float32, rows, chunks, groups, srow, gshift int)
TEXT ·dotQ8NF32(SB), NOSPLIT, $0-88
	Q8NBODY

#undef SCALE
#undef BIAS4
#undef BIAS1
#define SCALE ADD R3<<1, R2, R4; MOVHU (R4), R5; LSLW $16, R5; VDUP R5, V17.S4
#define BIAS4 VLD1.P 8(R10), [V21.H4]; SHLL16(21, 21)
#define BIAS1 MOVHU.P 2(R10), R5; LSLW $16, R5; FMOVS R5, F21

// func dotQ4NBF16(x *float32, w *uint32, scales, biases unsafe.Pointer, sums, out *float32, rows, chunks, groups, srow, gshift int)
TEXT ·dotQ4NBF16(SB), NOSPLIT, $0-88
	Q4NBODY

// func dotQ8NBF16(x *float32, w *uint32, scales, biases unsafe.Pointer, sums, out *float32, rows, chunks, groups, srow, gshift int)
TEXT ·dotQ8NBF16(SB), NOSPLIT, $0-88
	Q8NBODY

#undef SCALE
#undef BIAS4
#undef BIAS1
#define SCALE ADD R3<<1, R2, R4; MOVHU (R4), R5; FMOVS R5, F17; FCVTHS F17, F17; VDUP V17.S[0], V17.S4
#define BIAS4 VLD1.P 8(R10), [V21.H4]; FCVTL(21, 21)
#define BIAS1 MOVHU.P 2(R10), R5; FMOVS R5, F21; FCVTHS F21, F21

// func dotQ4NF16(x *float32, w *uint32, scales, biases unsafe.Pointer, sums, out *float32, rows, chunks, groups, srow, gshift int)
TEXT ·dotQ4NF16(SB), NOSPLIT, $0-88
	Q4NBODY

// func dotQ8NF16(x *float32, w *uint32, scales, biases unsafe.Pointer, sums, out *float32, rows, chunks, groups, srow, gshift int)
TEXT ·dotQ8NF16(SB), NOSPLIT, $0-88
	Q8NBODY

