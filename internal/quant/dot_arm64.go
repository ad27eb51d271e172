//go:build arm64

package quant

import (
	"math/bits"
	"unsafe"
)

// simd is false: the AVX2 float kernels have no NEON version yet; the decode kernels do.
const simd = false

// neon reports whether the NEON decode kernels of dotq_arm64.s run (Advanced SIMD is part
// of every arm64 CPU; SetSIMD turns them off for tests).
var neon = true

func decodeOn() bool { return neon }

// decodeLanes is 4 (NEON) for rows of n codes with cpl codes per word: every supported
// group size is a whole number of the NEON kernels' chunks.
func decodeLanes(n, cpl int) int {
	if n%(4*cpl) != 0 {
		return 0
	}
	return 4
}

// SetAVX512 reports false: there is no AVX-512 on arm64.
func SetAVX512(bool) bool { return false }

// The NEON decode kernels of dotq_arm64.s, one per scale type: for rows consecutive
// packed rows, out[r] = x · the dequantized row r, x' in the order and scaling Vec.Prepare
// gives it; chunks of 32 4-bit or 16 8-bit codes, gshift the log2 of the group size, srow
// the bytes of scales (and of biases) per row.
//
//go:noescape
func dotQ4NF32(x *float32, w *uint32, scales, biases unsafe.Pointer, sums, out *float32, rows, chunks, groups, srow, gshift int)

//go:noescape
func dotQ4NBF16(x *float32, w *uint32, scales, biases unsafe.Pointer, sums, out *float32, rows, chunks, groups, srow, gshift int)

//go:noescape
func dotQ4NF16(x *float32, w *uint32, scales, biases unsafe.Pointer, sums, out *float32, rows, chunks, groups, srow, gshift int)

//go:noescape
func dotQ8NF32(x *float32, w *uint32, scales, biases unsafe.Pointer, sums, out *float32, rows, chunks, groups, srow, gshift int)

//go:noescape
func dotQ8NBF16(x *float32, w *uint32, scales, biases unsafe.Pointer, sums, out *float32, rows, chunks, groups, srow, gshift int)

//go:noescape
func dotQ8NF16(x *float32, w *uint32, scales, biases unsafe.Pointer, sums, out *float32, rows, chunks, groups, srow, gshift int)

func dotQ4Rows(x *float32, w *uint32, scales, biases unsafe.Pointer, sums, out *float32, rows, n, group, _ int, st ScaleType) {
	groups, chunks, gshift := n/group, n/32, bits.TrailingZeros(uint(group))
	switch st {
	case ScaleBF16:
		dotQ4NBF16(x, w, scales, biases, sums, out, rows, chunks, groups, 2*groups, gshift)
	case ScaleF16:
		dotQ4NF16(x, w, scales, biases, sums, out, rows, chunks, groups, 2*groups, gshift)
	default:
		dotQ4NF32(x, w, scales, biases, sums, out, rows, chunks, groups, 4*groups, gshift)
	}
}

func dotQ8Rows(x *float32, w *uint32, scales, biases unsafe.Pointer, sums, out *float32, rows, n, group, _ int, st ScaleType) {
	groups, chunks, gshift := n/group, n/16, bits.TrailingZeros(uint(group))
	switch st {
	case ScaleBF16:
		dotQ8NBF16(x, w, scales, biases, sums, out, rows, chunks, groups, 2*groups, gshift)
	case ScaleF16:
		dotQ8NF16(x, w, scales, biases, sums, out, rows, chunks, groups, 2*groups, gshift)
	default:
		dotQ8NF32(x, w, scales, biases, sums, out, rows, chunks, groups, 4*groups, gshift)
	}
}

// SetSIMD switches the NEON decode kernels on or off (for tests and benchmarks of the plain
// Go kernels) and returns the previous setting. It must not be called while kernels run.
func SetSIMD(on bool) bool {
	prev := neon
	neon = on
	return prev
}

func dot4x8(x, w *float32, stride, n int, out *[4]float32) { panic("unreachable") }

func dot4x8x2(x0, x1, w *float32, stride, n int, out *[8]float32) { panic("unreachable") }

func axpy4x8(y, w *float32, stride, n int, p *[4]float32) { panic("unreachable") }

func widen8(dst *float32, src *uint16, n int) { panic("unreachable") }

func swiglu8(out, gate, up *float32, n int) { panic("unreachable") }

func dequantQ4(dst *float32, w *uint32, scales, biases unsafe.Pointer, groups, blocks, st int) {
	panic("unreachable")
}

func dequantQ8(dst *float32, w *uint32, scales, biases unsafe.Pointer, groups, blocks, st int) {
	panic("unreachable")
}

// decodeKernel names the decode kernels that run (tests).
func decodeKernel() string {
	if neon {
		return "neon"
	}
	return "go"
}
