package quant

import (
	"math/bits"
	"unsafe"

	"golang.org/x/sys/cpu"
)

// simd reports whether the AVX2+FMA(+F16C) kernels in dot_amd64.s can run.
var simd = cpu.X86.HasAVX2 && cpu.X86.HasFMA && cpu.X86.HasF16C

// The decode kernels of dotq_amd64.s: for rows consecutive packed rows, out[r] = x · the
// dequantized row r, x' being the vector in the order and scaling Vec.Prepare gives it. One
// variant per scale type (and, for 4 bits, per group layout: groups of 32 codes put two
// scales in one chunk of 64). srow is the bytes of scales (and of biases) per row.
//
//go:noescape
func dotQ4F32(x *float32, w *uint32, scales, biases unsafe.Pointer, sums, out *float32, rows, chunks, groups, srow, boff, pstep int)

//go:noescape
func dotQ4BF16(x *float32, w *uint32, scales, biases unsafe.Pointer, sums, out *float32, rows, chunks, groups, srow, boff, pstep int)

//go:noescape
func dotQ4F16(x *float32, w *uint32, scales, biases unsafe.Pointer, sums, out *float32, rows, chunks, groups, srow, boff, pstep int)

//go:noescape
func dotQ4F32G32(x *float32, w *uint32, scales, biases unsafe.Pointer, sums, out *float32, rows, chunks, groups, srow, boff, pstep int)

//go:noescape
func dotQ4BF16G32(x *float32, w *uint32, scales, biases unsafe.Pointer, sums, out *float32, rows, chunks, groups, srow, boff, pstep int)

//go:noescape
func dotQ4F16G32(x *float32, w *uint32, scales, biases unsafe.Pointer, sums, out *float32, rows, chunks, groups, srow, boff, pstep int)

//go:noescape
func dotQ8F32(x *float32, w *uint32, scales, biases unsafe.Pointer, sums, out *float32, rows, chunks, groups, srow, gshift int)

//go:noescape
func dotQ8BF16(x *float32, w *uint32, scales, biases unsafe.Pointer, sums, out *float32, rows, chunks, groups, srow, gshift int)

//go:noescape
func dotQ8F16(x *float32, w *uint32, scales, biases unsafe.Pointer, sums, out *float32, rows, chunks, groups, srow, gshift int)

// dotQ4Rows runs the 4-bit kernel for scales of type st over rows rows of len(x') codes in
// groups of group (len(x') a multiple of 64).
func dotQ4Rows(x *float32, w *uint32, scales, biases unsafe.Pointer, sums, out *float32, rows, n, group int, st ScaleType) {
	elem := 2
	if st == ScaleF32 {
		elem = 4
	}
	groups := n / group
	chunks, srow := n/64, groups*elem
	switch group {
	case 32:
		// SCALEA reads the chunk's two scales at R10, SCALEB the next two; 4 per pair.
		switch st {
		case ScaleBF16:
			dotQ4BF16G32(x, w, scales, biases, sums, out, rows, chunks, groups, srow, 0, 4*elem)
		case ScaleF16:
			dotQ4F16G32(x, w, scales, biases, sums, out, rows, chunks, groups, srow, 0, 4*elem)
		default:
			dotQ4F32G32(x, w, scales, biases, sums, out, rows, chunks, groups, srow, 0, 4*elem)
		}
		return
	}
	boff, pstep := elem, 2*elem // group 64: a scale per chunk
	if group == 128 {
		boff, pstep = 0, elem // a scale per pair of chunks
	}
	switch st {
	case ScaleBF16:
		dotQ4BF16(x, w, scales, biases, sums, out, rows, chunks, groups, srow, boff, pstep)
	case ScaleF16:
		dotQ4F16(x, w, scales, biases, sums, out, rows, chunks, groups, srow, boff, pstep)
	default:
		dotQ4F32(x, w, scales, biases, sums, out, rows, chunks, groups, srow, boff, pstep)
	}
}

// dotQ8Rows is dotQ4Rows for 8-bit codes (len(x') a multiple of 32).
func dotQ8Rows(x *float32, w *uint32, scales, biases unsafe.Pointer, sums, out *float32, rows, n, group int, st ScaleType) {
	groups, chunks := n/group, n/32
	gshift := bits.TrailingZeros(uint(group))
	switch st {
	case ScaleBF16:
		dotQ8BF16(x, w, scales, biases, sums, out, rows, chunks, groups, groups*2, gshift)
	case ScaleF16:
		dotQ8F16(x, w, scales, biases, sums, out, rows, chunks, groups, groups*2, gshift)
	default:
		dotQ8F32(x, w, scales, biases, sums, out, rows, chunks, groups, groups*4, gshift)
	}
}

// decodeOn reports whether the decode kernels (dotQ4Rows, dotQ8Rows) run; their vectors
// have decodeLanes lanes.
func decodeOn() bool { return simd }

const decodeLanes = 8

// SetSIMD switches the assembly kernels on or off (for tests and benchmarks of the
// plain Go kernels) and returns the previous setting; it cannot turn them on where the
// CPU lacks them. It must not be called while kernels run.
func SetSIMD(on bool) bool {
	prev := simd
	simd = on && cpu.X86.HasAVX2 && cpu.X86.HasFMA && cpu.X86.HasF16C
	return prev
}

// dot4x8 writes x·w_0 .. x·w_3 into out for the rows w_k = w + k*stride (stride in
// floats), over n values, n a positive multiple of 8.
//
//go:noescape
func dot4x8(x, w *float32, stride, n int, out *[4]float32)

// dot4x8x2 is dot4x8 for two vectors: out[k] = x0·w_k, out[4+k] = x1·w_k.
//
//go:noescape
func dot4x8x2(x0, x1, w *float32, stride, n int, out *[8]float32)

// axpy4x8 adds Σ_k p[k]·w_k to y over n values, n a positive multiple of 8.
//
//go:noescape
func axpy4x8(y, w *float32, stride, n int, p *[4]float32)

// widen8 converts n fp16 values to float32, n a positive multiple of 8.
//
//go:noescape
func widen8(dst *float32, src *uint16, n int)

// swiglu8 writes gate·up / (1 + e^-gate) into out over n values, n a positive multiple of 8.
//
//go:noescape
func swiglu8(out, gate, up *float32, n int)

// dequantQ4F32 writes scale·code + bias for groups groups of blocks runs of 16 4-bit codes,
// float32 scales and biases; the BF16 and F16 variants read 16-bit ones.
//
//go:noescape
func dequantQ4F32(dst *float32, w *uint32, scales, biases unsafe.Pointer, groups, blocks int)

//go:noescape
func dequantQ4BF16(dst *float32, w *uint32, scales, biases unsafe.Pointer, groups, blocks int)

//go:noescape
func dequantQ4F16(dst *float32, w *uint32, scales, biases unsafe.Pointer, groups, blocks int)

// dequantQ8F32 is dequantQ4F32 for 8-bit codes, blocks runs of 8 codes per group.
//
//go:noescape
func dequantQ8F32(dst *float32, w *uint32, scales, biases unsafe.Pointer, groups, blocks int)

//go:noescape
func dequantQ8BF16(dst *float32, w *uint32, scales, biases unsafe.Pointer, groups, blocks int)

//go:noescape
func dequantQ8F16(dst *float32, w *uint32, scales, biases unsafe.Pointer, groups, blocks int)

// dequantQ4 and dequantQ8 pick the variant for scales and biases of ScaleType st.
func dequantQ4(dst *float32, w *uint32, scales, biases unsafe.Pointer, groups, blocks, st int) {
	switch ScaleType(st) {
	case ScaleBF16:
		dequantQ4BF16(dst, w, scales, biases, groups, blocks)
	case ScaleF16:
		dequantQ4F16(dst, w, scales, biases, groups, blocks)
	default:
		dequantQ4F32(dst, w, scales, biases, groups, blocks)
	}
}

func dequantQ8(dst *float32, w *uint32, scales, biases unsafe.Pointer, groups, blocks, st int) {
	switch ScaleType(st) {
	case ScaleBF16:
		dequantQ8BF16(dst, w, scales, biases, groups, blocks)
	case ScaleF16:
		dequantQ8F16(dst, w, scales, biases, groups, blocks)
	default:
		dequantQ8F32(dst, w, scales, biases, groups, blocks)
	}
}
