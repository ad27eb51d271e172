#include "textflag.h"

// Decode-time products of packed 4- and 8-bit rows with a prepared vector (Vec), AVX2+FMA.
//
// Each 32-bit word of a 4-bit row holds 8 codes (code j of the word at bits 4j..4j+3).
// A chunk is 8 consecutive words (64 codes), one word per lane. Code j of every lane is
// isolated in place with one AND (mask 15<<4j; the last one with a shift by 28) and
// converted to float32 exactly as q·2^(4j); Vec.Prepare scales the matching inputs by
// 2^(-4j), so the product is x·q exactly. That is three vector instructions per 8 codes
// (AND, convert, FMA) and no shuffles. 8-bit rows work the same way with 4 codes per word
// (masks 255<<8j, the last one a shift by 24) and chunks of 32 codes.
//
// The arithmetic of one row is fixed, whatever the number of rows a call covers, so that
// a row gives bit-identical results alone or in any batch (see Vec.DotRowsStored):
//   per chunk c:  e = x'0·v0 (+ x'2·v2 + x'4·v4 + x'6·v6, FMAs in that order; 8-bit: v0, v2)
//                 o = x'1·v1 (+ x'3·v3 + x'5·v5 + x'7·v7;                       8-bit: v1, v3)
//                 tot[c&1] = fma(e+o, scale vector of chunk c, tot[c&1])
//   bias term:    bv = Σ over runs of 8 groups of fma(biases, sums) (lane-wise), then
//                 bs = Σ over the remaining groups of fma(bias, sum) (scalar, in order)
//   result:       hsum((tot0+tot1)+bv) + bs, hsum = lanes (i)+(i+4), then two HADDPS.
//
// Each pair of chunks prefetches the weights 2048 bytes (8-bit: 4096), some 4096 codes,
// ahead: over a matrix larger than the caches the hardware prefetcher alone leaves the
// kernel waiting on memory, and a shorter distance does not cover the memory's latency
// at the rate the kernel consumes codes (BenchmarkDecodeDRAM times the product from
// memory).

DATA q4m<>+0(SB)/4, $0x0000000f
DATA q4m<>+4(SB)/4, $0x000000f0
DATA q4m<>+8(SB)/4, $0x00000f00
DATA q4m<>+12(SB)/4, $0x0000f000
DATA q4m<>+16(SB)/4, $0x000f0000
DATA q4m<>+20(SB)/4, $0x00f00000
DATA q4m<>+24(SB)/4, $0x0f000000
DATA q4m<>+28(SB)/4, $0x000000ff
DATA q4m<>+32(SB)/4, $0x0000ff00
DATA q4m<>+36(SB)/4, $0x00ff0000
GLOBL q4m<>(SB), RODATA|NOPTR, $40

// 0x0f000000 in every lane: the seventh 4-bit mask as a memory operand (registers run out).
DATA q4m6<>+0(SB)/8, $0x0f0000000f000000
DATA q4m6<>+8(SB)/8, $0x0f0000000f000000
DATA q4m6<>+16(SB)/8, $0x0f0000000f000000
DATA q4m6<>+24(SB)/8, $0x0f0000000f000000
GLOBL q4m6<>(SB), RODATA|NOPTR, $32

// Q4PAIR: chunks A (Y0, at DI) and B (Y1, at DI+32), inputs x' at R11 and R11+256:
// e/o accumulators Y4/Y5 (A) and Y6/Y7 (B); then the scales (SCALEA into Y0, SCALEB into
// Y1) and tot0 (Y14) += a_A·sA, tot1 (Y15) += a_B·sB.
#define Q4PAIR \
	VMOVDQU (DI), Y0 \
	VMOVDQU 32(DI), Y1 \
	VPAND Y8, Y0, Y2 \
	VPAND Y8, Y1, Y3 \
	VCVTDQ2PS Y2, Y2 \
	VCVTDQ2PS Y3, Y3 \
	VMULPS (R11), Y2, Y4 \
	VMULPS 256(R11), Y3, Y6 \
	VPAND Y9, Y0, Y2 \
	VPAND Y9, Y1, Y3 \
	VCVTDQ2PS Y2, Y2 \
	VCVTDQ2PS Y3, Y3 \
	VMULPS 32(R11), Y2, Y5 \
	VMULPS 288(R11), Y3, Y7 \
	VPAND Y10, Y0, Y2 \
	VPAND Y10, Y1, Y3 \
	VCVTDQ2PS Y2, Y2 \
	VCVTDQ2PS Y3, Y3 \
	VFMADD231PS 64(R11), Y2, Y4 \
	VFMADD231PS 320(R11), Y3, Y6 \
	VPAND Y11, Y0, Y2 \
	VPAND Y11, Y1, Y3 \
	VCVTDQ2PS Y2, Y2 \
	VCVTDQ2PS Y3, Y3 \
	VFMADD231PS 96(R11), Y2, Y5 \
	VFMADD231PS 352(R11), Y3, Y7 \
	VPAND Y12, Y0, Y2 \
	VPAND Y12, Y1, Y3 \
	VCVTDQ2PS Y2, Y2 \
	VCVTDQ2PS Y3, Y3 \
	VFMADD231PS 128(R11), Y2, Y4 \
	VFMADD231PS 384(R11), Y3, Y6 \
	VPAND Y13, Y0, Y2 \
	VPAND Y13, Y1, Y3 \
	VCVTDQ2PS Y2, Y2 \
	VCVTDQ2PS Y3, Y3 \
	VFMADD231PS 160(R11), Y2, Y5 \
	VFMADD231PS 416(R11), Y3, Y7 \
	VPAND q4m6<>(SB), Y0, Y2 \
	VPAND q4m6<>(SB), Y1, Y3 \
	VCVTDQ2PS Y2, Y2 \
	VCVTDQ2PS Y3, Y3 \
	VFMADD231PS 192(R11), Y2, Y4 \
	VFMADD231PS 448(R11), Y3, Y6 \
	VPSRLD $28, Y0, Y2 \
	VPSRLD $28, Y1, Y3 \
	VCVTDQ2PS Y2, Y2 \
	VCVTDQ2PS Y3, Y3 \
	VFMADD231PS 224(R11), Y2, Y5 \
	VFMADD231PS 480(R11), Y3, Y7 \
	VADDPS Y5, Y4, Y4 \
	VADDPS Y7, Y6, Y6 \
	SCALEA \
	VFMADD231PS Y0, Y4, Y14 \
	SCALEB \
	VFMADD231PS Y1, Y6, Y15

// Q4ONE: chunk A alone (the last of an odd number), into tot0.
#define Q4ONE \
	VMOVDQU (DI), Y0 \
	VPAND Y8, Y0, Y2 \
	VCVTDQ2PS Y2, Y2 \
	VMULPS (R11), Y2, Y4 \
	VPAND Y9, Y0, Y2 \
	VCVTDQ2PS Y2, Y2 \
	VMULPS 32(R11), Y2, Y5 \
	VPAND Y10, Y0, Y2 \
	VCVTDQ2PS Y2, Y2 \
	VFMADD231PS 64(R11), Y2, Y4 \
	VPAND Y11, Y0, Y2 \
	VCVTDQ2PS Y2, Y2 \
	VFMADD231PS 96(R11), Y2, Y5 \
	VPAND Y12, Y0, Y2 \
	VCVTDQ2PS Y2, Y2 \
	VFMADD231PS 128(R11), Y2, Y4 \
	VPAND Y13, Y0, Y2 \
	VCVTDQ2PS Y2, Y2 \
	VFMADD231PS 160(R11), Y2, Y5 \
	VPAND q4m6<>(SB), Y0, Y2 \
	VCVTDQ2PS Y2, Y2 \
	VFMADD231PS 192(R11), Y2, Y4 \
	VPSRLD $28, Y0, Y2 \
	VCVTDQ2PS Y2, Y2 \
	VFMADD231PS 224(R11), Y2, Y5 \
	VADDPS Y5, Y4, Y4 \
	SCALEA \
	VFMADD231PS Y0, Y4, Y14 \
	ADDQ $32, DI

// BIASSUM: the bias term of the row (biases at R12, group sums at sums+32(FP), groups+64(FP)
// groups), the horizontal sum and the store to (R8). Clobbers AX, CX, DX, R10, Y0-Y3.
#define BIASSUM \
	MOVQ R12, R10 \
	MOVQ sums+32(FP), DX \
	VXORPS Y2, Y2, Y2 \
	MOVQ groups+64(FP), CX \
	SHRQ $3, CX \
	JZ brem \
bvec: \
	BIAS8 \
	VFMADD231PS (DX), Y3, Y2 \
	ADDQ $BSTEP8, R10 \
	ADDQ $32, DX \
	DECQ CX \
	JNZ bvec \
brem: \
	VXORPS X1, X1, X1 \
	MOVQ groups+64(FP), CX \
	ANDQ $7, CX \
	JZ hsum \
bone: \
	BIAS1 \
	VFMADD231SS (DX), X3, X1 \
	ADDQ $BSTEP1, R10 \
	ADDQ $4, DX \
	DECQ CX \
	JNZ bone \
hsum: \
	VADDPS Y15, Y14, Y14 \
	VADDPS Y2, Y14, Y14 \
	VEXTRACTF128 $1, Y14, X0 \
	VADDPS X0, X14, X0 \
	VHADDPS X0, X0, X0 \
	VHADDPS X0, X0, X0 \
	VADDSS X1, X0, X0 \
	VMOVSS X0, (R8)

// Q4BODY: the whole 4-bit kernel.
// func(x *float32, w *uint32, scales, biases unsafe.Pointer, sums, out *float32, rows, chunks, groups, srow, boff, pstep int)
// srow: bytes of scales (and of biases) per row; SCALEB reads at R10+boff, and R10 moves
// on by pstep bytes per pair of chunks.
#define Q4BODY \
	MOVQ x+0(FP), SI \
	MOVQ w+8(FP), DI \
	MOVQ scales+16(FP), R13 \
	MOVQ biases+24(FP), R12 \
	MOVQ out+40(FP), R8 \
	MOVQ rows+48(FP), R14 \
	MOVQ boff+80(FP), AX \
	MOVQ pstep+88(FP), R9 \
	VPBROADCASTD q4m<>+0(SB), Y8 \
	VPBROADCASTD q4m<>+4(SB), Y9 \
	VPBROADCASTD q4m<>+8(SB), Y10 \
	VPBROADCASTD q4m<>+12(SB), Y11 \
	VPBROADCASTD q4m<>+16(SB), Y12 \
	VPBROADCASTD q4m<>+20(SB), Y13 \
row: \
	MOVQ SI, R11 \
	MOVQ R13, R10 \
	VXORPS Y14, Y14, Y14 \
	VXORPS Y15, Y15, Y15 \
	MOVQ chunks+56(FP), BX \
	SHRQ $1, BX \
	JZ tail \
pair: \
	PREFETCHT0 2048(DI) \
	Q4PAIR \
	ADDQ $64, DI \
	ADDQ $512, R11 \
	ADDQ R9, R10 \
	DECQ BX \
	JNZ pair \
tail: \
	TESTQ $1, chunks+56(FP) \
	JZ bias \
	Q4ONE \
bias: \
	BIASSUM \
	ADDQ $4, R8 \
	ADDQ srow+72(FP), R13 \
	ADDQ srow+72(FP), R12 \
	DECQ R14 \
	JNZ row \
	VZEROUPPER \
	RET

// Q8PAIR: 8-bit chunks A (Y0) and B (Y1) of 32 codes, inputs x' at R11 and R11+128;
// R9 is the pair's first code within the row, CX the log2 of the group size.
#define Q8PAIR \
	VMOVDQU (DI), Y0 \
	VMOVDQU 32(DI), Y1 \
	VPAND Y8, Y0, Y2 \
	VPAND Y8, Y1, Y3 \
	VCVTDQ2PS Y2, Y2 \
	VCVTDQ2PS Y3, Y3 \
	VMULPS (R11), Y2, Y4 \
	VMULPS 128(R11), Y3, Y6 \
	VPAND Y9, Y0, Y2 \
	VPAND Y9, Y1, Y3 \
	VCVTDQ2PS Y2, Y2 \
	VCVTDQ2PS Y3, Y3 \
	VMULPS 32(R11), Y2, Y5 \
	VMULPS 160(R11), Y3, Y7 \
	VPAND Y10, Y0, Y2 \
	VPAND Y10, Y1, Y3 \
	VCVTDQ2PS Y2, Y2 \
	VCVTDQ2PS Y3, Y3 \
	VFMADD231PS 64(R11), Y2, Y4 \
	VFMADD231PS 192(R11), Y3, Y6 \
	VPSRLD $24, Y0, Y2 \
	VPSRLD $24, Y1, Y3 \
	VCVTDQ2PS Y2, Y2 \
	VCVTDQ2PS Y3, Y3 \
	VFMADD231PS 96(R11), Y2, Y5 \
	VFMADD231PS 224(R11), Y3, Y7 \
	VADDPS Y5, Y4, Y4 \
	VADDPS Y7, Y6, Y6 \
	MOVQ R9, DX \
	SHRQ CX, DX \
	LEAQ 32(R9), AX \
	SHRQ CX, AX \
	SCALE8(DX, Y0, X0) \
	VFMADD231PS Y0, Y4, Y14 \
	SCALE8(AX, Y1, X1) \
	VFMADD231PS Y1, Y6, Y15

#define Q8ONE \
	VMOVDQU (DI), Y0 \
	VPAND Y8, Y0, Y2 \
	VCVTDQ2PS Y2, Y2 \
	VMULPS (R11), Y2, Y4 \
	VPAND Y9, Y0, Y2 \
	VCVTDQ2PS Y2, Y2 \
	VMULPS 32(R11), Y2, Y5 \
	VPAND Y10, Y0, Y2 \
	VCVTDQ2PS Y2, Y2 \
	VFMADD231PS 64(R11), Y2, Y4 \
	VPSRLD $24, Y0, Y2 \
	VCVTDQ2PS Y2, Y2 \
	VFMADD231PS 96(R11), Y2, Y5 \
	VADDPS Y5, Y4, Y4 \
	MOVQ R9, DX \
	SHRQ CX, DX \
	SCALE8(DX, Y0, X0) \
	VFMADD231PS Y0, Y4, Y14 \
	ADDQ $32, DI

// Q8BODY: the whole 8-bit kernel.
// func(x *float32, w *uint32, scales, biases unsafe.Pointer, sums, out *float32, rows, chunks, groups, srow, gshift int)
#define Q8BODY \
	MOVQ x+0(FP), SI \
	MOVQ w+8(FP), DI \
	MOVQ scales+16(FP), R13 \
	MOVQ biases+24(FP), R12 \
	MOVQ out+40(FP), R8 \
	MOVQ rows+48(FP), R14 \
	VPBROADCASTD q4m<>+28(SB), Y8 \
	VPBROADCASTD q4m<>+32(SB), Y9 \
	VPBROADCASTD q4m<>+36(SB), Y10 \
row: \
	MOVQ SI, R11 \
	XORQ R9, R9 \
	MOVQ gshift+80(FP), CX \
	VXORPS Y14, Y14, Y14 \
	VXORPS Y15, Y15, Y15 \
	MOVQ chunks+56(FP), BX \
	SHRQ $1, BX \
	JZ tail \
pair: \
	PREFETCHT0 4096(DI) \
	Q8PAIR \
	ADDQ $64, DI \
	ADDQ $256, R11 \
	ADDQ $64, R9 \
	DECQ BX \
	JNZ pair \
tail: \
	TESTQ $1, chunks+56(FP) \
	JZ bias \
	Q8ONE \
bias: \
	BIASSUM \
	ADDQ $4, R8 \
	ADDQ srow+72(FP), R13 \
	ADDQ srow+72(FP), R12 \
	DECQ R14 \
	JNZ row \
	VZEROUPPER \
	RET

// Scale vectors for groups of 64 or more codes: one scale broadcast over the chunk.
#define SCALEA VBROADCASTSS (R10), Y0
#define SCALEB VBROADCASTSS (R10)(AX*1), Y1
#define BIAS8 VMOVUPS (R10), Y3
#define BIAS1 VMOVSS (R10), X3
#define BSTEP8 32
#define BSTEP1 4

// func dotQ4F32(x *float32, w *uint32, scales, biases unsafe.Pointer, sums, out *float32, rows, chunks, groups, srow, boff, pstep int)
TEXT ·dotQ4F32(SB), NOSPLIT, $0-96
	Q4BODY

#undef SCALEA
#undef SCALEB
#undef BIAS8
#undef BIAS1
#undef BSTEP8
#undef BSTEP1
#define SCALEA VPBROADCASTW (R10), Y0; VPSLLD $16, Y0, Y0
#define SCALEB VPBROADCASTW (R10)(AX*1), Y1; VPSLLD $16, Y1, Y1
#define BIAS8 VPMOVZXWD (R10), Y3; VPSLLD $16, Y3, Y3
#define BIAS1 MOVWLZX (R10), BX; SHLL $16, BX; VMOVD BX, X3
#define BSTEP8 16
#define BSTEP1 2

// func dotQ4BF16(x *float32, w *uint32, scales, biases unsafe.Pointer, sums, out *float32, rows, chunks, groups, srow, boff, pstep int)
TEXT ·dotQ4BF16(SB), NOSPLIT, $0-96
	Q4BODY

#undef SCALEA
#undef SCALEB
#undef BIAS1
#undef BIAS8
#define SCALEA VPBROADCASTW (R10), X0; VCVTPH2PS X0, Y0
#define SCALEB VPBROADCASTW (R10)(AX*1), X1; VCVTPH2PS X1, Y1
#define BIAS8 VCVTPH2PS (R10), Y3
#define BIAS1 MOVWLZX (R10), BX; VMOVD BX, X3; VCVTPH2PS X3, X3

// func dotQ4F16(x *float32, w *uint32, scales, biases unsafe.Pointer, sums, out *float32, rows, chunks, groups, srow, boff, pstep int)
TEXT ·dotQ4F16(SB), NOSPLIT, $0-96
	Q4BODY

// Groups of 32 codes: a chunk covers two, lanes 0-3 and 4-7.
#undef SCALEA
#undef SCALEB
#undef BIAS8
#undef BIAS1
#undef BSTEP8
#undef BSTEP1
#define SCALEA VBROADCASTSS (R10), X0; VBROADCASTSS 4(R10), X2; VINSERTF128 $1, X2, Y0, Y0
#define SCALEB VBROADCASTSS 8(R10), X1; VBROADCASTSS 12(R10), X2; VINSERTF128 $1, X2, Y1, Y1
#define BIAS8 VMOVUPS (R10), Y3
#define BIAS1 VMOVSS (R10), X3
#define BSTEP8 32
#define BSTEP1 4

// func dotQ4F32G32(x *float32, w *uint32, scales, biases unsafe.Pointer, sums, out *float32, rows, chunks, groups, srow, boff, pstep int)
TEXT ·dotQ4F32G32(SB), NOSPLIT, $0-96
	Q4BODY

#undef SCALEA
#undef SCALEB
#undef BIAS8
#undef BIAS1
#undef BSTEP8
#undef BSTEP1
#define SCALEA VPBROADCASTW (R10), X0; VPBROADCASTW 2(R10), X2; VINSERTI128 $1, X2, Y0, Y0; VPSLLD $16, Y0, Y0
#define SCALEB VPBROADCASTW 4(R10), X1; VPBROADCASTW 6(R10), X2; VINSERTI128 $1, X2, Y1, Y1; VPSLLD $16, Y1, Y1
#define BIAS8 VPMOVZXWD (R10), Y3; VPSLLD $16, Y3, Y3
#define BIAS1 MOVWLZX (R10), BX; SHLL $16, BX; VMOVD BX, X3
#define BSTEP8 16
#define BSTEP1 2

// func dotQ4BF16G32(x *float32, w *uint32, scales, biases unsafe.Pointer, sums, out *float32, rows, chunks, groups, srow, boff, pstep int)
TEXT ·dotQ4BF16G32(SB), NOSPLIT, $0-96
	Q4BODY

#undef SCALEA
#undef SCALEB
#undef BIAS8
#undef BIAS1
#define SCALEA VPBROADCASTW (R10), X0; VPBROADCASTW 2(R10), X2; VPUNPCKLQDQ X2, X0, X0; VCVTPH2PS X0, Y0
#define SCALEB VPBROADCASTW 4(R10), X1; VPBROADCASTW 6(R10), X2; VPUNPCKLQDQ X2, X1, X1; VCVTPH2PS X1, Y1
#define BIAS8 VCVTPH2PS (R10), Y3
#define BIAS1 MOVWLZX (R10), BX; VMOVD BX, X3; VCVTPH2PS X3, X3

// func dotQ4F16G32(x *float32, w *uint32, scales, biases unsafe.Pointer, sums, out *float32, rows, chunks, groups, srow, boff, pstep int)
TEXT ·dotQ4F16G32(SB), NOSPLIT, $0-96
	Q4BODY

#undef BIAS8
#undef BIAS1
#undef BSTEP8
#undef BSTEP1
#define SCALE8(idx, y, x) VBROADCASTSS (R13)(idx*4), y
#define BIAS8 VMOVUPS (R10), Y3
#define BIAS1 VMOVSS (R10), X3
#define BSTEP8 32
#define BSTEP1 4

// func dotQ8F32(x *float32, w *uint32, scales, biases unsafe.Pointer, sums, out *float32, rows, chunks, groups, srow, gshift int)
TEXT ·dotQ8F32(SB), NOSPLIT, $0-88
	Q8BODY

#undef SCALE8
#undef BIAS8
#undef BIAS1
#undef BSTEP8
#undef BSTEP1
#define SCALE8(idx, y, x) VPBROADCASTW (R13)(idx*2), y; VPSLLD $16, y, y
#define BIAS8 VPMOVZXWD (R10), Y3; VPSLLD $16, Y3, Y3
#define BIAS1 MOVWLZX (R10), BX; SHLL $16, BX; VMOVD BX, X3
#define BSTEP8 16
#define BSTEP1 2

// func dotQ8BF16(x *float32, w *uint32, scales, biases unsafe.Pointer, sums, out *float32, rows, chunks, groups, srow, gshift int)
TEXT ·dotQ8BF16(SB), NOSPLIT, $0-88
	Q8BODY

#undef SCALE8
#undef BIAS8
#undef BIAS1
#define SCALE8(idx, y, x) VPBROADCASTW (R13)(idx*2), x; VCVTPH2PS x, y
#define BIAS8 VCVTPH2PS (R10), Y3
#define BIAS1 MOVWLZX (R10), BX; VMOVD BX, X3; VCVTPH2PS X3, X3

// func dotQ8F16(x *float32, w *uint32, scales, biases unsafe.Pointer, sums, out *float32, rows, chunks, groups, srow, gshift int)
TEXT ·dotQ8F16(SB), NOSPLIT, $0-88
	Q8BODY
