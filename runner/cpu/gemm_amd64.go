package cpu

import "golang.org/x/sys/cpu"

// gemmSIMD reports whether the prefill kernel of gemm_amd64.s runs (tests turn it off to
// check the plain Go kernel the same way).
var gemmSIMD = cpu.X86.HasAVX2 && cpu.X86.HasFMA

//go:noescape
func dot4x3(x *float32, xstride int, w *float32, wstride int, n int, out *[12]float32)

//go:noescape
func dot4x3To(x *float32, xstride int, w *float32, wstride int, n int, c *float32, ldc int, acc bool)
