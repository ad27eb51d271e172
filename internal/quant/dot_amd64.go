package quant

import "golang.org/x/sys/cpu"

// simd reports whether the AVX2+FMA kernels in dot_amd64.s can run.
var simd = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// dotQ4 returns Σ_g scales[g] · Σ x'·codes over groups groups of blocks runs of 16
// 4-bit codes (8 bytes each), x' in the order Vec.Prepare permutes it.
//
//go:noescape
func dotQ4(x *float32, w *uint32, scales *float32, groups, blocks int) float32

// dotQ8 is dotQ4 for 8-bit codes, blocks runs of 8 codes per group, x in order.
//
//go:noescape
func dotQ8(x *float32, w *uint32, scales *float32, groups, blocks int) float32

// setSIMD switches the assembly kernels on or off (for tests of the plain kernels) and
// returns the previous setting; it cannot turn them on where the CPU lacks them.
func setSIMD(on bool) bool {
	prev := simd
	simd = on && cpu.X86.HasAVX2 && cpu.X86.HasFMA
	return prev
}
