package quant

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

// simd reports whether the AVX2+FMA(+F16C) kernels in dot_amd64.s can run.
var simd = cpu.X86.HasAVX2 && cpu.X86.HasFMA && cpu.X86.HasF16C

// dotQ4Rows writes, for rows consecutive packed rows (with their scales and biases),
// out[r] = Σ_g scales[g]·Σ x'·codes + biases[g]·sums[g], over groups groups of blocks
// runs of 16 4-bit codes (8 bytes each), x' in the order Vec.Prepare permutes it. Scales
// and biases are of ScaleType st: float32, bf16 or fp16.
//
//go:noescape
func dotQ4Rows(x *float32, w *uint32, scales, biases unsafe.Pointer, sums, out *float32, rows, groups, blocks, st int)

// dotQ8Rows is dotQ4Rows for 8-bit codes, blocks runs of 8 codes per group, x in order.
//
//go:noescape
func dotQ8Rows(x *float32, w *uint32, scales, biases unsafe.Pointer, sums, out *float32, rows, groups, blocks, st int)

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

// dequantQ4 writes scale·code + bias for groups groups of blocks runs of 16 4-bit codes,
// scales and biases of ScaleType st.
//
//go:noescape
func dequantQ4(dst *float32, w *uint32, scales, biases unsafe.Pointer, groups, blocks, st int)

// dequantQ8 is dequantQ4 for 8-bit codes, blocks runs of 8 codes per group.
//
//go:noescape
func dequantQ8(dst *float32, w *uint32, scales, biases unsafe.Pointer, groups, blocks, st int)
