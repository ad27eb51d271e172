package kvstore

import "golang.org/x/sys/cpu"

// hadamardSIMD reports whether hadamard8 runs (tests turn it off to compare with the
// plain loops): a rotated layout rotates every query and output row of a decode step,
// which the plain loops make a few percent of the step's attention.
var hadamardSIMD = cpu.X86.HasAVX2 && cpu.X86.HasFMA

//go:noescape
func hadamard8(x *float32, n int, scale float32)

// hadamardFast rotates x (len a power of two) with hadamard8, bit for bit as the plain
// loops do, and reports whether it did.
func hadamardFast(x []float32, scale float32) bool {
	if !hadamardSIMD || len(x) < 8 {
		return false
	}
	hadamard8(&x[0], len(x), scale)
	return true
}
