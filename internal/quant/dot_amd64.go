package quant

import (
	"math/bits"
	"unsafe"

	"golang.org/x/sys/cpu"
)

// simd reports whether the AVX2+FMA(+F16C) kernels in dot_amd64.s can run.
var simd = cpu.X86.HasAVX2 && cpu.X86.HasFMA && cpu.X86.HasF16C

// avx512 reports whether the AVX-512 decode kernels of dotq512_amd64.s run (on CPUs with
// AVX-512 F, BW and VL; GODEBUG=cpu.avx512f=off turns them off).
var avx512 = simd && hasAVX512()

func hasAVX512() bool { return cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512VL }

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

// The AVX-512 decode kernels of dotq512_amd64.s: idx spreads a chunk's nscales scales over
// the 16 lanes (VPERMPS indices).
//
//go:noescape
func dotQ4ZF32(x *float32, w *uint32, scales, biases unsafe.Pointer, sums, out *float32, rows, chunks, groups, srow, gshift int, idx *int32, nscales int)

//go:noescape
func dotQ4ZBF16(x *float32, w *uint32, scales, biases unsafe.Pointer, sums, out *float32, rows, chunks, groups, srow, gshift int, idx *int32, nscales int)

//go:noescape
func dotQ4ZF16(x *float32, w *uint32, scales, biases unsafe.Pointer, sums, out *float32, rows, chunks, groups, srow, gshift int, idx *int32, nscales int)

//go:noescape
func dotQ8ZF32(x *float32, w *uint32, scales, biases unsafe.Pointer, sums, out *float32, rows, chunks, groups, srow, gshift int, idx *int32, nscales int)

//go:noescape
func dotQ8ZBF16(x *float32, w *uint32, scales, biases unsafe.Pointer, sums, out *float32, rows, chunks, groups, srow, gshift int, idx *int32, nscales int)

//go:noescape
func dotQ8ZF16(x *float32, w *uint32, scales, biases unsafe.Pointer, sums, out *float32, rows, chunks, groups, srow, gshift int, idx *int32, nscales int)

// laneGroup[cpl][group] is, for a 16-lane chunk of codes with cpl codes per lane, the group
// (counted from the chunk's first) of each lane.
var laneGroup = func() map[[2]int]*[16]int32 {
	m := map[[2]int]*[16]int32{}
	for _, cpl := range []int{4, 8} {
		for _, g := range []int{32, 64, 128} {
			var t [16]int32
			for l := range t {
				t[l] = int32(l * cpl / g)
			}
			m[[2]int{cpl, g}] = &t
		}
	}
	return m
}()

// dotZ runs an AVX-512 kernel: codes per lane cpl (8 for 4 bits, 4 for 8).
func dotZ(f func(x *float32, w *uint32, scales, biases unsafe.Pointer, sums, out *float32, rows, chunks, groups, srow, gshift int, idx *int32, nscales int),
	x *float32, w *uint32, scales, biases unsafe.Pointer, sums, out *float32, rows, n, group, cpl int, st ScaleType) {
	elem := 2
	if st == ScaleF32 {
		elem = 4
	}
	groups, chunk := n/group, 16*cpl
	f(x, w, scales, biases, sums, out, rows, n/chunk, groups, groups*elem, bits.TrailingZeros(uint(group)),
		&laneGroup[[2]int{cpl, group}][0], max(1, chunk/group))
}

// decodeLanes is the lane count of the decode kernel that takes rows of n codes with cpl
// codes per 32-bit word (8 for 4 bits, 4 for 8): 16 (AVX-512) or 8 (AVX2) where the row is
// a whole number of that kernel's chunks, else 0 (the plain Go kernel).
func decodeLanes(n, cpl int) int {
	switch {
	case !simd:
		return 0
	case avx512 && n%(16*cpl) == 0:
		return 16
	case n%(8*cpl) == 0:
		return 8
	}
	return 0
}

// dotQ4Rows runs the 4-bit kernel of lanes lanes for scales of type st over rows rows of n
// codes in groups of group (n a multiple of 8·lanes).
func dotQ4Rows(x *float32, w *uint32, scales, biases unsafe.Pointer, sums, out *float32, rows, n, group, lanes int, st ScaleType) {
	if lanes == 16 {
		switch st {
		case ScaleBF16:
			dotZ(dotQ4ZBF16, x, w, scales, biases, sums, out, rows, n, group, 8, st)
		case ScaleF16:
			dotZ(dotQ4ZF16, x, w, scales, biases, sums, out, rows, n, group, 8, st)
		default:
			dotZ(dotQ4ZF32, x, w, scales, biases, sums, out, rows, n, group, 8, st)
		}
		return
	}
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

// dotQ8Rows is dotQ4Rows for 8-bit codes (n a multiple of 4·lanes).
func dotQ8Rows(x *float32, w *uint32, scales, biases unsafe.Pointer, sums, out *float32, rows, n, group, lanes int, st ScaleType) {
	if lanes == 16 {
		switch st {
		case ScaleBF16:
			dotZ(dotQ8ZBF16, x, w, scales, biases, sums, out, rows, n, group, 4, st)
		case ScaleF16:
			dotZ(dotQ8ZF16, x, w, scales, biases, sums, out, rows, n, group, 4, st)
		default:
			dotZ(dotQ8ZF32, x, w, scales, biases, sums, out, rows, n, group, 4, st)
		}
		return
	}
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

// decodeOn reports whether the decode kernels (dotQ4Rows, dotQ8Rows) run.
func decodeOn() bool { return simd }

// SetSIMD switches the assembly kernels on or off (for tests and benchmarks of the
// plain Go kernels) and returns the previous setting; it cannot turn them on where the
// CPU lacks them. It must not be called while kernels run.
func SetSIMD(on bool) bool {
	prev := simd
	simd = on && cpu.X86.HasAVX2 && cpu.X86.HasFMA && cpu.X86.HasF16C
	avx512 = simd && hasAVX512()
	return prev
}

// SetAVX512 switches the AVX-512 decode kernels on or off (the AVX2 ones run instead) and
// returns the previous setting; it cannot turn them on where the CPU lacks them. Vectors
// prepared before must be prepared again. It must not be called while kernels run.
func SetAVX512(on bool) bool {
	prev := avx512
	avx512 = on && simd && hasAVX512()
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

// decodeKernel names the decode kernels that run (tests).
func decodeKernel() string {
	switch {
	case !simd:
		return "go"
	case avx512:
		return "avx512"
	}
	return "avx2"
}
