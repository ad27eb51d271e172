package quant

import (
	"math/bits"
	"unsafe"
)

//go:generate go run dotqn_gen.go

// multiKernel reports whether VecN's multi-vector kernels take rows of bits-bit codes
// prepared for a decode kernel of lanes lanes: the AVX2 ones (an AVX-512 machine runs
// each vector through Vec's kernel, whose result a multi-vector AVX2 kernel would not
// reproduce).
func multiKernel(b, lanes int) bool { return simd && lanes == 8 && (b == 4 || b == 8) }

// sumRun is the run of groups the multi-vector kernels' bias term takes at once.
func sumRun(int) int { return 8 }

// dotMulti runs the multi-vector kernel for n vectors (2..VecsN) over rows rows of cols
// codes; stride in floats.
func dotMulti(n int, x *float32, w *uint32, scales, biases unsafe.Pointer, sums, out *float32, rows, cols, group, b, lanes int, st ScaleType, stride int) {
	elem := 2
	if st == ScaleF32 {
		elem = 4
	}
	groups := cols / group
	srow := groups * elem
	if b == 8 {
		dotQxKernels[1][st][0][n-2](x, w, scales, biases, sums, out, rows, cols/32, groups, srow, bits.TrailingZeros(uint(group)), 0, 4*stride)
		return
	}
	layout, boff, pstep := 0, elem, 2*elem // group 64: a scale per chunk
	switch group {
	case 32:
		layout, boff, pstep = 1, 0, 4*elem // two scales per chunk
	case 128:
		boff, pstep = 0, elem // a scale per pair of chunks
	}
	dotQxKernels[0][st][layout][n-2](x, w, scales, biases, sums, out, rows, cols/64, groups, srow, boff, pstep, 4*stride)
}
