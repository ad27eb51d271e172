#include "textflag.h"

// func dot4x3(x *float32, xstride int, w *float32, wstride int, n int, out *[12]float32)
// out[3t+r] = Σ_{i<n} x[t·xstride+i]·w[r·wstride+i] for 4 token rows t and 3 weight rows
// r, n a positive multiple of 8: twelve accumulators, 7 loads per 12 multiply-adds; the
// token rows are meant to stay in L1 and the weight rows to stream from L2.
TEXT ·dot4x3(SB), NOSPLIT, $0-48
	MOVQ x+0(FP), SI
	MOVQ xstride+8(FP), R8
	SHLQ $2, R8
	MOVQ w+16(FP), DI
	MOVQ wstride+24(FP), R10
	SHLQ $2, R10
	MOVQ n+32(FP), CX
	MOVQ out+40(FP), DX
	LEAQ (R8)(R8*2), R9 // 3·xstride bytes
	SHRQ $3, CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11

loop:
	VMOVUPS (DI), Y12
	VMOVUPS (DI)(R10*1), Y13
	VMOVUPS (DI)(R10*2), Y14
	VMOVUPS (SI), Y15
	VFMADD231PS Y12, Y15, Y0
	VFMADD231PS Y13, Y15, Y1
	VFMADD231PS Y14, Y15, Y2
	VMOVUPS (SI)(R8*1), Y15
	VFMADD231PS Y12, Y15, Y3
	VFMADD231PS Y13, Y15, Y4
	VFMADD231PS Y14, Y15, Y5
	VMOVUPS (SI)(R8*2), Y15
	VFMADD231PS Y12, Y15, Y6
	VFMADD231PS Y13, Y15, Y7
	VFMADD231PS Y14, Y15, Y8
	VMOVUPS (SI)(R9*1), Y15
	VFMADD231PS Y12, Y15, Y9
	VFMADD231PS Y13, Y15, Y10
	VFMADD231PS Y14, Y15, Y11
	ADDQ $32, SI
	ADDQ $32, DI
	DECQ CX
	JNZ loop

	// Horizontal sums, four accumulators at a time into out[0:4], [4:8], [8:12].
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
	VHADDPS Y9, Y8, Y8
	VHADDPS Y11, Y10, Y10
	VHADDPS Y10, Y8, Y8
	VEXTRACTF128 $1, Y8, X9
	VADDPS X9, X8, X8
	VMOVUPS X8, 32(DX)
	VZEROUPPER
	RET
