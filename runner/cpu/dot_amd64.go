package cpu

import "golang.org/x/sys/cpu"

// simd reports whether the AVX2+FMA kernels in dot_amd64.s can run.
var simd = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// dot4x8 writes x·w0 .. x·w3 into out, for rows w0 = w, w1 = w+stride, ... (stride in
// floats), over n values, n a positive multiple of 8.
//
//go:noescape
func dot4x8(x, w *float32, stride, n int, out *[4]float32)

// dot4x8x2 is dot4x8 for two tokens at once: out[k] = x0·w_k, out[4+k] = x1·w_k.
//
//go:noescape
func dot4x8x2(x0, x1, w *float32, stride, n int, out *[8]float32)

// setSIMD switches the assembly kernels on or off (for tests of the plain kernels) and
// returns the previous setting; it cannot turn them on where the CPU lacks them.
func setSIMD(on bool) bool {
	prev := simd
	simd = on && cpu.X86.HasAVX2 && cpu.X86.HasFMA
	return prev
}
