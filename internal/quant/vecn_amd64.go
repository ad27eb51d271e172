package quant

import (
	"math/bits"
	"unsafe"
)

//go:generate go run dotqn_gen.go

// multiKernel reports whether a multi-vector kernel takes n vectors and rows of b-bit codes
// prepared for a decode kernel of lanes lanes (AVX2's 8: up to 6 vectors; AVX-512's 16: up
// to 4).
func multiKernel(b, lanes, n int) bool {
	return (b == 4 || b == 8) && (lanes == 8 && simd && n <= 6 || lanes == 16 && avx512 && n <= 4)
}

// VecsFor is the most vectors one VecN should hold for rows of cols codes of bits each: as
// many as this machine's multi-vector kernel takes. (Sets of 4 to 6 cost about the same
// per vector, sets of 3 more, so a pass of 9 rows takes 5 and 4 rather than 3 sets.)
func VecsFor(cols, bits int) int {
	if (bits == 4 || bits == 8) && decodeLanes(cols, 32/bits) == 8 {
		return 6
	}
	return 4
}

// sumRun is the run of groups the bias term of the multi-vector kernel of lanes lanes
// takes at once.
func sumRun(lanes int) int {
	if lanes == 16 {
		return 16
	}
	return 8
}

// dotMulti runs the multi-vector kernel for n vectors (2..VecsN) over rows rows of cols
// codes; stride in floats.
func dotMulti(n int, x *float32, w *uint32, scales, biases unsafe.Pointer, sums, out *float32, rows, cols, group, b, lanes int, st ScaleType, stride int) {
	elem := 2
	if st == ScaleF32 {
		elem = 4
	}
	groups := cols / group
	srow := groups * elem
	bi := 0
	if b == 8 {
		bi = 1
	}
	if lanes == 16 {
		cpl := 32 / b
		chunk := 16 * cpl
		dotQZxKernels[bi][st][n-2](x, w, scales, biases, sums, out, rows, cols/chunk, groups, srow, bits.TrailingZeros(uint(group)),
			&laneGroup[[2]int{cpl, group}][0], max(1, chunk/group), 4*stride)
		return
	}
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
