#include "textflag.h"
#include "fused_amd64.h"

// The group kernels: decode attention straight from the cache's codes for a whole GQA
// group of query heads per pass, one head per lane (fused_group_amd64.go). Rows lie
// cstride code bytes and hstride fp16 bytes apart; each position's row is prefetched 8
// positions ahead, as the pair kernels do.

// ZERO8 clears the accumulators of the 8 heads.
#define ZERO8 \
	VXORPS Y0, Y0, Y0; \
	VXORPS Y1, Y1, Y1; \
	VXORPS Y2, Y2, Y2; \
	VXORPS Y3, Y3, Y3; \
	VXORPS Y4, Y4, Y4; \
	VXORPS Y5, Y5, Y5; \
	VXORPS Y6, Y6, Y6; \
	VXORPS Y7, Y7, Y7

// KFMA8 adds a run of 16 converted codes (Y8: the query's first 8 floats of the run,
// Y9: the next 8) times each head's run at (R15), 64 bytes a head, to Y0-Y7.
#define KFMA8 \
	VFMADD231PS (R15), Y8, Y0; \
	VFMADD231PS 32(R15), Y9, Y0; \
	VFMADD231PS 64(R15), Y8, Y1; \
	VFMADD231PS 96(R15), Y9, Y1; \
	VFMADD231PS 128(R15), Y8, Y2; \
	VFMADD231PS 160(R15), Y9, Y2; \
	VFMADD231PS 192(R15), Y8, Y3; \
	VFMADD231PS 224(R15), Y9, Y3; \
	VFMADD231PS 256(R15), Y8, Y4; \
	VFMADD231PS 288(R15), Y9, Y4; \
	VFMADD231PS 320(R15), Y8, Y5; \
	VFMADD231PS 352(R15), Y9, Y5; \
	VFMADD231PS 384(R15), Y8, Y6; \
	VFMADD231PS 416(R15), Y9, Y6; \
	VFMADD231PS 448(R15), Y8, Y7; \
	VFMADD231PS 480(R15), Y9, Y7

// KFMA4 is KFMA8 for 4 heads (64 bytes a head, 256 a run), into Y0-Y3.
#define KFMA4 \
	VFMADD231PS (R15), Y8, Y0; \
	VFMADD231PS 32(R15), Y9, Y0; \
	VFMADD231PS 64(R15), Y8, Y1; \
	VFMADD231PS 96(R15), Y9, Y1; \
	VFMADD231PS 128(R15), Y8, Y2; \
	VFMADD231PS 160(R15), Y9, Y2; \
	VFMADD231PS 192(R15), Y8, Y3; \
	VFMADD231PS 224(R15), Y9, Y3

// ZERO4 clears the accumulators of 4 heads.
#define ZERO4 \
	VXORPS Y0, Y0, Y0; \
	VXORPS Y1, Y1, Y1; \
	VXORPS Y2, Y2, Y2; \
	VXORPS Y3, Y3, Y3

// GSUM4 is GSUM for Y0-Y3: lanes 0-3 of Y1, lanes 4-7 zero (a VEX 128-bit operation
// clears the upper half).
#define GSUM4 \
	VHADDPS Y1, Y0, Y0; \
	VHADDPS Y3, Y2, Y2; \
	VHADDPS Y2, Y0, Y0; \
	VEXTRACTF128 $1, Y0, X1; \
	VADDPS X1, X0, X1

// GSUM sums each of Y0-Y7 across its lanes into lane h of Y1 (h the register's number):
// two rounds of pairwise horizontal adds, then the 128-bit halves added.
#define GSUM \
	VHADDPS Y1, Y0, Y0; \
	VHADDPS Y3, Y2, Y2; \
	VHADDPS Y5, Y4, Y4; \
	VHADDPS Y7, Y6, Y6; \
	VHADDPS Y2, Y0, Y0; \
	VHADDPS Y6, Y4, Y4; \
	VPERM2F128 $0x20, Y4, Y0, Y1; \
	VPERM2F128 $0x31, Y4, Y0, Y2; \
	VADDPS Y2, Y1, Y1

// GSCALE takes a group's (scale, bias) in X2 and the heads' query sums of the group at
// (R14): Y10 += Y1·scale + sums·bias.
#define GSCALE \
	VBROADCASTSS X2, Y3; \
	VFMADD231PS Y1, Y3, Y10; \
	VMOVSHDUP X2, X2; \
	VBROADCASTSS X2, Y3; \
	VFMADD231PS (R14), Y3, Y10

// KARGS loads the key kernels' arguments: out DI, q R10, qs R11, codes SI, sb DX, n R8,
// cstride R12, hstride R13.
#define KARGS \
	MOVQ out+0(FP), DI; \
	MOVQ q+8(FP), R10; \
	MOVQ qs+16(FP), R11; \
	MOVQ codes+24(FP), SI; \
	MOVQ sb+32(FP), DX; \
	MOVQ n+40(FP), R8; \
	MOVQ cstride+48(FP), R12; \
	MOVQ hstride+56(FP), R13

// KDOT8 is the body of the 8-bit key kernels, for a width of heads given by its
// accumulators' ZERO, KFMA and SUM and the q floats a run of 16 codes takes (RUN bytes):
// per position and group, each run's codes are converted once and multiplied with every
// head's run of q; the group's sums are scaled and the bias term added into Y10.
#define KDOT8(ZERO, KFMA, SUM, RUN) \
g8pos:; \
	PREFETCHT0 (SI)(R12*8); \
	PREFETCHT0 (DX)(R13*8); \
	PREFETCHT0 64(SI)(R12*8); \
	PREFETCHT0 127(SI)(R12*8); \
	VXORPS Y10, Y10, Y10; \
	MOVQ SI, CX; \
	MOVQ R10, R15; \
	MOVQ R11, R14; \
	XORQ BX, BX; \
g8group:; \
	ZERO; \
	MOVQ blocks+72(FP), R9; \
g8block:; \
	VPMOVZXBD (CX), Y8; \
	VPMOVZXBD 8(CX), Y9; \
	VCVTDQ2PS Y8, Y8; \
	VCVTDQ2PS Y9, Y9; \
	KFMA; \
	ADDQ $16, CX; \
	ADDQ $RUN, R15; \
	DECQ R9; \
	JNZ g8block; \
	SUM; \
	MOVL (DX)(BX*4), R9; \
	VMOVD R9, X2; \
	VCVTPH2PS X2, X2; \
	GSCALE; \
	ADDQ $32, R14; \
	INCQ BX; \
	CMPQ BX, groups+64(FP); \
	JLT g8group; \
	VMOVUPS Y10, (DI); \
	ADDQ $32, DI; \
	ADDQ R12, SI; \
	ADDQ R13, DX; \
	DECQ R8; \
	JNZ g8pos; \
	VZEROUPPER; \
	RET

// KDOT4 is KDOT8 for 4-bit codes (8 bytes a run of 16; Y15 holds 15 in every lane), with
// q4_0's groups where q40 is set.
#define KDOT4(ZERO, KFMA, SUM, RUN) \
g4pos:; \
	PREFETCHT0 (SI)(R12*8); \
	PREFETCHT0 (DX)(R13*8); \
	PREFETCHT0 63(SI)(R12*8); \
	VXORPS Y10, Y10, Y10; \
	MOVQ SI, CX; \
	MOVQ R10, R15; \
	MOVQ R11, R14; \
	XORQ BX, BX; \
g4group:; \
	ZERO; \
	MOVQ blocks+72(FP), R9; \
g4block:; \
	VPMOVZXBD (CX), Y8; \
	VPSRLD $4, Y8, Y9; \
	VPAND Y15, Y8, Y8; \
	VCVTDQ2PS Y8, Y8; \
	VCVTDQ2PS Y9, Y9; \
	KFMA; \
	ADDQ $8, CX; \
	ADDQ $RUN, R15; \
	DECQ R9; \
	JNZ g4block; \
	SUM; \
	CMPB q40+80(FP), $0; \
	JNE g4q40; \
	MOVL (DX)(BX*4), R9; \
	VMOVD R9, X2; \
	VCVTPH2PS X2, X2; \
	JMP g4sb; \
g4q40:; \
	Q40SB((DX)(BX*2), R9, X2); \
g4sb:; \
	GSCALE; \
	ADDQ $32, R14; \
	INCQ BX; \
	CMPQ BX, groups+64(FP); \
	JLT g4group; \
	VMOVUPS Y10, (DI); \
	ADDQ $32, DI; \
	ADDQ R12, SI; \
	ADDQ R13, DX; \
	DECQ R8; \
	JNZ g4pos; \
	VZEROUPPER; \
	RET

// KDOT6 is KDOT8 for 6-bit codes (12 bytes a run of 16, UNPACK6; Y15 holds c6mask),
// each head's run of q scaled by 2^-s lane by lane as prepareQGroup writes it.
#define KDOT6(ZERO, KFMA, SUM, RUN) \
g6pos:; \
	PREFETCHT0 (SI)(R12*8); \
	PREFETCHT0 (DX)(R13*8); \
	PREFETCHT0 64(SI)(R12*8); \
	PREFETCHT0 95(SI)(R12*8); \
	VXORPS Y10, Y10, Y10; \
	MOVQ SI, CX; \
	MOVQ R10, R15; \
	MOVQ R11, R14; \
	XORQ BX, BX; \
g6group:; \
	ZERO; \
	MOVQ blocks+72(FP), R9; \
g6block:; \
	UNPACK6((CX), 4(CX), Y8, Y9, Y13, Y14, Y15); \
	KFMA; \
	ADDQ $12, CX; \
	ADDQ $RUN, R15; \
	DECQ R9; \
	JNZ g6block; \
	SUM; \
	MOVL (DX)(BX*4), R9; \
	VMOVD R9, X2; \
	VCVTPH2PS X2, X2; \
	GSCALE; \
	ADDQ $32, R14; \
	INCQ BX; \
	CMPQ BX, groups+64(FP); \
	JLT g6group; \
	VMOVUPS Y10, (DI); \
	ADDQ $32, DI; \
	ADDQ R12, SI; \
	ADDQ R13, DX; \
	DECQ R8; \
	JNZ g6pos; \
	VZEROUPPER; \
	RET

// VH6ADD scales a head's 16 sums of code·2^s back by 2^-s (c6down, in Y14) and adds
// them to its accumulator at P, 16 floats a half: R11 is the half's first element (0
// or 16).
#define VH6ADD(lo, hi, P) \
	VMULPS Y14, lo, lo; \
	VMULPS Y14, hi, hi; \
	VADDPS (P)(R11*4), lo, lo; \
	VMOVUPS lo, (P)(R11*4); \
	VADDPS 32(P)(R11*4), hi, hi; \
	VMOVUPS hi, 32(P)(R11*4)

// func kdot8x8(out, q, qs *float32, codes *uint32, sb *uint16, n, cstride, hstride, groups, blocks int)
// out[8j+h] = Σ_g scale_g·(q_h·codes_g) + bias_g·qs[8g+h] for position j, 8-bit codes,
// blocks runs of 16 codes a group; q holds, for each run, the 8 heads' 16 floats.
TEXT ·kdot8x8(SB), NOSPLIT, $0-80
	KARGS
	KDOT8(ZERO8, KFMA8, GSUM, 512)

// func kdot4x8(out, q, qs *float32, codes *uint32, sb *uint16, n, cstride, hstride, groups, blocks int, q40 bool)
// kdot8x8 for 4-bit codes (8 bytes a run of 16), each head's run of q permuted as
// prepareQ does: its 8 even elements, then its 8 odd ones. With q40 the groups are
// q4_0's, (d, -8d) made from d (Q40SB).
TEXT ·kdot4x8(SB), NOSPLIT, $0-81
	KARGS
	MOVL $15, BX
	VMOVD BX, X15
	VPBROADCASTD X15, Y15
	KDOT4(ZERO8, KFMA8, GSUM, 512)

// func kdot8x4(out, q, qs *float32, codes *uint32, sb *uint16, n, cstride, hstride, groups, blocks int)
// kdot8x8 for 4 heads (groups of 3 or 4): q holds, for each run, the 4 heads' 16 floats;
// out keeps 8 floats a position, lanes 4-7 zero.
TEXT ·kdot8x4(SB), NOSPLIT, $0-80
	KARGS
	KDOT8(ZERO4, KFMA4, GSUM4, 256)

// func kdot4x4(out, q, qs *float32, codes *uint32, sb *uint16, n, cstride, hstride, groups, blocks int, q40 bool)
// kdot4x8 for 4 heads, as kdot8x4 is kdot8x8's.
TEXT ·kdot4x4(SB), NOSPLIT, $0-81
	KARGS
	MOVL $15, BX
	VMOVD BX, X15
	VPBROADCASTD X15, Y15
	KDOT4(ZERO4, KFMA4, GSUM4, 256)

// func vcoef8(cf, bsum, p *float32, sb *uint16, n, hstride int, q40 bool)
// For one value group at n positions (its fp16 (scale, bias) at sb, hstride bytes apart;
// with q40 q4_0's d, taken as (d, -8d)): cf[8j+h] = p[8j+h]·scale_j, and
// bsum[h] += Σ_j p[8j+h]·bias_j.
TEXT ·vcoef8(SB), NOSPLIT, $0-49
	MOVQ cf+0(FP), DI
	MOVQ bsum+8(FP), R9
	MOVQ p+16(FP), R10
	MOVQ sb+24(FP), DX
	MOVQ n+32(FP), R8
	MOVQ hstride+40(FP), R13
	VMOVUPS (R9), Y12

vcpos:
	CMPB q40+48(FP), $0
	JNE vcq40
	MOVL (DX), BX
	VMOVD BX, X1
	VCVTPH2PS X1, X1
	JMP vcsb

vcq40:
	Q40SB((DX), BX, X1)

vcsb:
	VBROADCASTSS X1, Y2
	VMULPS (R10), Y2, Y3
	VMOVUPS Y3, (DI)
	VMOVSHDUP X1, X1
	VBROADCASTSS X1, Y2
	VFMADD231PS (R10), Y2, Y12
	ADDQ $32, R10
	ADDQ $32, DI
	ADDQ R13, DX
	DECQ R8
	JNZ vcpos

	VMOVUPS Y12, (R9)
	VZEROUPPER
	RET

// VH4FMA adds the converted codes Y8 and Y9 times the 4 heads' coefficients at (R9) to
// their accumulators: head h's in Y(2h) (with Y8) and Y(2h+1) (with Y9).
#define VH4FMA \
	VBROADCASTSS (R9), Y10; \
	VFMADD231PS Y8, Y10, Y0; \
	VFMADD231PS Y9, Y10, Y1; \
	VBROADCASTSS 4(R9), Y11; \
	VFMADD231PS Y8, Y11, Y2; \
	VFMADD231PS Y9, Y11, Y3; \
	VBROADCASTSS 8(R9), Y10; \
	VFMADD231PS Y8, Y10, Y4; \
	VFMADD231PS Y9, Y10, Y5; \
	VBROADCASTSS 12(R9), Y11; \
	VFMADD231PS Y8, Y11, Y6; \
	VFMADD231PS Y9, Y11, Y7

// VH4LOAD sets up a pass over the n positions (DX) for half R11 of the run.
#define VH4LOAD \
	MOVQ SI, CX; \
	ADDQ R11, CX; \
	MOVQ R10, R9; \
	MOVQ DX, R8

// VH8ADD adds 16 in-order floats (lo, hi) to the head's accumulator at P, 16 floats
// (64 bytes) a half: R11 is the half's offset in 8-bit code bytes (0 or 16).
#define VH8ADD(lo, hi, P) \
	VADDPS (P)(R11*4), lo, lo; \
	VMOVUPS lo, (P)(R11*4); \
	VADDPS 32(P)(R11*4), hi, hi; \
	VMOVUPS hi, 32(P)(R11*4)

// func vacc8h4(acc0, acc1, acc2, acc3, cf *float32, codes *uint32, n, cstride int)
// acc_h[d] += Σ_j cf[8j+h]·code_j[d] for 4 heads over a run of 32 8-bit codes (d < 32)
// at n positions, in two halves of 16 codes: 8 accumulators hold 4 heads × 16.
TEXT ·vacc8h4(SB), NOSPLIT, $0-64
	MOVQ cf+32(FP), R10
	MOVQ codes+40(FP), SI
	MOVQ n+48(FP), DX
	MOVQ cstride+56(FP), R12
	XORQ R11, R11

vh8half:
	ZERO8
	VH4LOAD

vh8pos:
	PREFETCHT0 (CX)(R12*8)
	VPMOVZXBD (CX), Y8
	VPMOVZXBD 8(CX), Y9
	VCVTDQ2PS Y8, Y8
	VCVTDQ2PS Y9, Y9
	VH4FMA
	ADDQ $32, R9
	ADDQ R12, CX
	DECQ R8
	JNZ vh8pos

	MOVQ acc0+0(FP), AX
	VH8ADD(Y0, Y1, AX)
	MOVQ acc1+8(FP), AX
	VH8ADD(Y2, Y3, AX)
	MOVQ acc2+16(FP), AX
	VH8ADD(Y4, Y5, AX)
	MOVQ acc3+24(FP), AX
	VH8ADD(Y6, Y7, AX)
	ADDQ $16, R11
	CMPQ R11, $32
	JLT vh8half
	VZEROUPPER
	RET

// VH4ADD interleaves a head's even (E) and odd (O) elements of 16 back into order and
// adds them to its accumulator at P, 16 floats a half: R11 is the half's offset in
// 4-bit code bytes (0 or 8).
#define VH4ADD(E, O, P) \
	EVENODD(E, O, Y12, Y13); \
	VADDPS (P)(R11*8), E, E; \
	VMOVUPS E, (P)(R11*8); \
	VADDPS 32(P)(R11*8), O, O; \
	VMOVUPS O, 32(P)(R11*8)

// func vacc4h4(acc0, acc1, acc2, acc3, cf *float32, codes *uint32, n, cstride int)
// vacc8h4 for 4-bit codes (8 bytes a half of 16), even and odd elements apart in the
// registers.
TEXT ·vacc4h4(SB), NOSPLIT, $0-64
	MOVQ cf+32(FP), R10
	MOVQ codes+40(FP), SI
	MOVQ n+48(FP), DX
	MOVQ cstride+56(FP), R12
	MOVL $15, BX
	VMOVD BX, X15
	VPBROADCASTD X15, Y15
	XORQ R11, R11

vh4half:
	ZERO8
	VH4LOAD

vh4pos:
	PREFETCHT0 (CX)(R12*8)
	VPMOVZXBD (CX), Y8
	VPSRLD $4, Y8, Y9        // odd elements
	VPAND Y15, Y8, Y8        // even elements
	VCVTDQ2PS Y8, Y8
	VCVTDQ2PS Y9, Y9
	VH4FMA
	ADDQ $32, R9
	ADDQ R12, CX
	DECQ R8
	JNZ vh4pos

	MOVQ acc0+0(FP), AX
	VH4ADD(Y0, Y1, AX)
	MOVQ acc1+8(FP), AX
	VH4ADD(Y2, Y3, AX)
	MOVQ acc2+16(FP), AX
	VH4ADD(Y4, Y5, AX)
	MOVQ acc3+24(FP), AX
	VH4ADD(Y6, Y7, AX)
	ADDQ $8, R11
	CMPQ R11, $16
	JLT vh4half
	VZEROUPPER
	RET

// func kdot6x8(out, q, qs *float32, codes *uint32, sb *uint16, n, cstride, hstride, groups, blocks int)
// kdot8x8 for 6-bit codes (12 bytes a run of 16).
TEXT ·kdot6x8(SB), NOSPLIT, $0-80
	KARGS
	VMOVDQU c6lo<>(SB), Y13
	VMOVDQU c6hi<>(SB), Y14
	VMOVDQU c6mask<>(SB), Y15
	KDOT6(ZERO8, KFMA8, GSUM, 512)

// func kdot6x4(out, q, qs *float32, codes *uint32, sb *uint16, n, cstride, hstride, groups, blocks int)
// kdot6x8 for 4 heads, as kdot8x4 is kdot8x8's.
TEXT ·kdot6x4(SB), NOSPLIT, $0-80
	KARGS
	VMOVDQU c6lo<>(SB), Y13
	VMOVDQU c6hi<>(SB), Y14
	VMOVDQU c6mask<>(SB), Y15
	KDOT6(ZERO4, KFMA4, GSUM4, 256)

// func vacc6h4(acc0, acc1, acc2, acc3, cf *float32, codes *uint32, n, cstride int)
// vacc8h4 for 6-bit codes (12 bytes a half of 16).
TEXT ·vacc6h4(SB), NOSPLIT, $0-64
	MOVQ cf+32(FP), R10
	MOVQ codes+40(FP), SI
	MOVQ n+48(FP), DX
	MOVQ cstride+56(FP), R12
	VMOVDQU c6lo<>(SB), Y12
	VMOVDQU c6hi<>(SB), Y13
	VMOVDQU c6mask<>(SB), Y15
	VMOVUPS c6down<>(SB), Y14
	XORQ R11, R11

vh6half:
	ZERO8
	LEAQ (R11)(R11*2), CX    // the half's first code byte: 3/4 of its first element
	SHRQ $2, CX
	ADDQ SI, CX
	MOVQ R10, R9
	MOVQ DX, R8

vh6pos:
	PREFETCHT0 (CX)(R12*8)
	UNPACK6((CX), 4(CX), Y8, Y9, Y12, Y13, Y15)
	VH4FMA
	ADDQ $32, R9
	ADDQ R12, CX
	DECQ R8
	JNZ vh6pos

	MOVQ acc0+0(FP), AX
	VH6ADD(Y0, Y1, AX)
	MOVQ acc1+8(FP), AX
	VH6ADD(Y2, Y3, AX)
	MOVQ acc2+16(FP), AX
	VH6ADD(Y4, Y5, AX)
	MOVQ acc3+24(FP), AX
	VH6ADD(Y6, Y7, AX)
	ADDQ $16, R11
	CMPQ R11, $32
	JLT vh6half
	VZEROUPPER
	RET
