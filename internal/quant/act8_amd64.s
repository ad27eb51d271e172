#include "textflag.h"

// Products of packed 4- and 8-bit rows with an input vector quantized to 8-bit integers
// (Vec8), AVX2. A chunk is 32 bytes of a row. VPMADDUBSW multiplies its unsigned code
// bytes with 32 signed input bytes and adds neighbours into 16-bit lanes; VPMADDWD with
// ones then adds neighbouring lanes into 32 bits, so 32-bit lane j holds the sum over word
// j of the chunk. Bounds: a 4-bit chunk's two halves give at most 4·15·127 per 16-bit lane,
// two chunks (group 128) 15240; an 8-bit chunk is split into its low and high nibbles, each
// summed over up to four chunks in 16 bits (15240 at most) and weighted 1 and 16 in
// VPMADDWD. Nothing overflows 16 bits.
//
// 4-bit: the low nibbles of a chunk are its even codes, the high nibbles its odd ones;
// Vec8 stores each 64 inputs as the 32 even ones, then the 32 odd ones.
//
// Per row: per block of 8 groups, their scales and biases are widened at once; the 8
// products s_g·d_g go to the stack and are broadcast one per group into
// acc += float(group's 32-bit lanes)·(s_g·d_g), and bacc += b·(d·Σc) lane-wise. Groups left
// over after the blocks take their scale and bias one at a time (the bias term into a
// scalar). Result: hsum(acc) + (hsum(bacc) + tail bias). The arithmetic of a row never
// depends on the rows around it.
//
// Registers: SI inputs, AX inputs of this row, R8 Vec8.dc, R15 offset into it, DI codes,
// R10 scales, R11 biases, DX out, CX rows left, BX groups, R14 groups left in the row,
// R13 scale type (0 float32, 1 bf16, 2 fp16), R9 scratch; Y8 bytes of 15, Y9 words of 1,
// Y7 words of 16, Y14 acc, Y15 bacc, X12 tail bias.

// Q4FIRST and Q4NEXT: one 4-bit chunk into the 16-bit sums Y3.
#define Q4FIRST \
	VMOVDQU (DI), Y0 \
	PREFETCHT0 2048(DI) \
	VPAND Y8, Y0, Y1 \
	VPSRLW $4, Y0, Y0 \
	VPAND Y8, Y0, Y0 \
	VPMADDUBSW (AX), Y1, Y1 \
	VPMADDUBSW 32(AX), Y0, Y0 \
	VPADDW Y0, Y1, Y3 \
	ADDQ $32, DI \
	ADDQ $64, AX

#define Q4NEXT \
	VMOVDQU (DI), Y0 \
	PREFETCHT0 2048(DI) \
	VPAND Y8, Y0, Y1 \
	VPSRLW $4, Y0, Y0 \
	VPAND Y8, Y0, Y0 \
	VPMADDUBSW (AX), Y1, Y1 \
	VPMADDUBSW 32(AX), Y0, Y0 \
	VPADDW Y0, Y1, Y1 \
	VPADDW Y1, Y3, Y3 \
	ADDQ $32, DI \
	ADDQ $64, AX

// Q8FIRST and Q8NEXT: one 8-bit chunk into the 16-bit sums of low nibbles Y3 and high Y4.
#define Q8FIRST \
	VMOVDQU (DI), Y0 \
	PREFETCHT0 4096(DI) \
	VPAND Y8, Y0, Y1 \
	VPSRLW $4, Y0, Y0 \
	VPAND Y8, Y0, Y0 \
	VPMADDUBSW (AX), Y1, Y3 \
	VPMADDUBSW (AX), Y0, Y4 \
	ADDQ $32, DI \
	ADDQ $32, AX

#define Q8NEXT \
	VMOVDQU (DI), Y0 \
	PREFETCHT0 4096(DI) \
	VPAND Y8, Y0, Y1 \
	VPSRLW $4, Y0, Y0 \
	VPAND Y8, Y0, Y0 \
	VPMADDUBSW (AX), Y1, Y1 \
	VPMADDUBSW (AX), Y0, Y0 \
	VPADDW Y1, Y3, Y3 \
	VPADDW Y0, Y4, Y4 \
	ADDQ $32, DI \
	ADDQ $32, AX

// Q4SUM and Q8SUM: the 16-bit sums into 32-bit lanes Y3.
#define Q4SUM VPMADDWD Y9, Y3, Y3
#define Q8SUM VPMADDWD Y9, Y3, Y3; VPMADDWD Y7, Y4, Y4; VPADDD Y4, Y3, Y3

// ACC: acc += float(Y3)·(the group's s·d at off(SP)).
#define ACC(off, acc) \
	VCVTDQ2PS Y3, Y3 \
	VBROADCASTSS off(SP), Y5 \
	VFMADD231PS Y5, Y3, acc

// HSUM: the sum of y's 8 lanes into the low lane of x.
#define HSUM(y, x) \
	VEXTRACTF128 $1, y, X5 \
	VADDPS X5, x, x \
	VHADDPS x, x, x \
	VHADDPS x, x, x

// BODY is a whole kernel; GROUP(off) is one group of the kernel's bit width and size.
#define BODY \
	MOVQ x+0(FP), SI \
	MOVQ dc+8(FP), R8 \
	MOVQ w+16(FP), DI \
	MOVQ scales+24(FP), R10 \
	MOVQ biases+32(FP), R11 \
	MOVQ out+40(FP), DX \
	MOVQ rows+48(FP), CX \
	MOVQ groups+56(FP), BX \
	MOVQ st+64(FP), R13 \
	MOVL $0x0f0f0f0f, R9 \
	VMOVD R9, X8 \
	VPBROADCASTD X8, Y8 \
	MOVL $0x00010001, R9 \
	VMOVD R9, X9 \
	VPBROADCASTD X9, Y9 \
	MOVL $0x00100010, R9 \
	VMOVD R9, X7 \
	VPBROADCASTD X7, Y7 \
row: \
	VXORPS Y14, Y14, Y14 \
	VXORPS Y13, Y13, Y13 \
	VXORPS Y15, Y15, Y15 \
	VXORPS X12, X12, X12 \
	MOVQ SI, AX \
	XORQ R15, R15 \
	MOVQ BX, R14 \
block: \
	CMPQ R14, $8 \
	JLT tail \
	CMPQ R13, $1 \
	JEQ block_bf16 \
	JGT block_f16 \
	VMOVUPS (R10), Y10 \
	VMOVUPS (R11), Y11 \
	ADDQ $32, R10 \
	ADDQ $32, R11 \
	JMP block_go \
block_bf16: \
	VPMOVZXWD (R10), Y10 \
	VPSLLD $16, Y10, Y10 \
	VPMOVZXWD (R11), Y11 \
	VPSLLD $16, Y11, Y11 \
	ADDQ $16, R10 \
	ADDQ $16, R11 \
	JMP block_go \
block_f16: \
	VCVTPH2PS (R10), Y10 \
	VCVTPH2PS (R11), Y11 \
	ADDQ $16, R10 \
	ADDQ $16, R11 \
block_go: \
	VFMADD231PS 32(R8)(R15*1), Y11, Y15 \
	VMULPS (R8)(R15*1), Y10, Y10 \
	VMOVUPS Y10, 0(SP) \
	GROUP(0, Y14) \
	GROUP(4, Y13) \
	GROUP(8, Y14) \
	GROUP(12, Y13) \
	GROUP(16, Y14) \
	GROUP(20, Y13) \
	GROUP(24, Y14) \
	GROUP(28, Y13) \
	ADDQ $64, R15 \
	SUBQ $8, R14 \
	JMP block \
tail: \
	TESTQ R14, R14 \
	JEQ done \
	CMPQ R13, $1 \
	JEQ tail_bf16 \
	JGT tail_f16 \
	VMOVSS (R10), X10 \
	VMOVSS (R11), X11 \
	ADDQ $4, R10 \
	ADDQ $4, R11 \
	JMP tail_go \
tail_bf16: \
	MOVWLZX (R10), R9 \
	SHLL $16, R9 \
	VMOVD R9, X10 \
	MOVWLZX (R11), R9 \
	SHLL $16, R9 \
	VMOVD R9, X11 \
	ADDQ $2, R10 \
	ADDQ $2, R11 \
	JMP tail_go \
tail_f16: \
	MOVWLZX (R10), R9 \
	VMOVD R9, X10 \
	VCVTPH2PS X10, X10 \
	MOVWLZX (R11), R9 \
	VMOVD R9, X11 \
	VCVTPH2PS X11, X11 \
	ADDQ $2, R10 \
	ADDQ $2, R11 \
tail_go: \
	VFMADD231SS 32(R8)(R15*1), X11, X12 \
	VMULSS (R8)(R15*1), X10, X10 \
	VMOVSS X10, 0(SP) \
	GROUP(0, Y14) \
	ADDQ $4, R15 \
	DECQ R14 \
	JMP tail \
done: \
	VADDPS Y13, Y14, Y14 \
	HSUM(Y14, X14) \
	HSUM(Y15, X15) \
	VADDSS X12, X15, X15 \
	VADDSS X15, X14, X14 \
	VMOVSS X14, (DX) \
	ADDQ $4, DX \
	DECQ CX \
	JNZ row \
	VZEROUPPER \
	RET

#define GROUP(off, acc) Q4FIRST; Q4SUM; ACC(off, acc)

// func dotQ4Int8G64(x *int8, dc *float32, w *uint32, scales, biases unsafe.Pointer, out *float32, rows, groups, st int)
TEXT ·dotQ4Int8G64(SB), NOSPLIT, $32-72
	BODY

#undef GROUP
#define GROUP(off, acc) Q4FIRST; Q4NEXT; Q4SUM; ACC(off, acc)

// func dotQ4Int8G128(x *int8, dc *float32, w *uint32, scales, biases unsafe.Pointer, out *float32, rows, groups, st int)
TEXT ·dotQ4Int8G128(SB), NOSPLIT, $32-72
	BODY

#undef GROUP
#define GROUP(off, acc) Q8FIRST; Q8SUM; ACC(off, acc)

// func dotQ8Int8G32(x *int8, dc *float32, w *uint32, scales, biases unsafe.Pointer, out *float32, rows, groups, st int)
TEXT ·dotQ8Int8G32(SB), NOSPLIT, $32-72
	BODY

#undef GROUP
#define GROUP(off, acc) Q8FIRST; Q8NEXT; Q8SUM; ACC(off, acc)

// func dotQ8Int8G64(x *int8, dc *float32, w *uint32, scales, biases unsafe.Pointer, out *float32, rows, groups, st int)
TEXT ·dotQ8Int8G64(SB), NOSPLIT, $32-72
	BODY

#undef GROUP
#define GROUP(off, acc) Q8FIRST; Q8NEXT; Q8NEXT; Q8NEXT; Q8SUM; ACC(off, acc)

// func dotQ8Int8G128(x *int8, dc *float32, w *uint32, scales, biases unsafe.Pointer, out *float32, rows, groups, st int)
TEXT ·dotQ8Int8G128(SB), NOSPLIT, $32-72
	BODY
