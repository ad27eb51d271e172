//go:build !amd64

package cpu

// gemmSIMD is false where gemm_amd64.s does not build: the plain kernel runs.
var gemmSIMD = false

func dot4x3(x *float32, xstride int, w *float32, wstride int, n int, out *[12]float32) {
	panic("unreachable")
}

func dot4x3To(x *float32, xstride int, w *float32, wstride int, n int, c *float32, ldc int, acc bool) {
	panic("unreachable")
}
