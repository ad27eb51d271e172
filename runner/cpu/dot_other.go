//go:build !amd64

package cpu

const simd = false

func dot4x8(x, w *float32, stride, n int, out *[4]float32) { panic("unreachable") }

func dot4x8x2(x0, x1, w *float32, stride, n int, out *[8]float32) { panic("unreachable") }

func setSIMD(bool) bool { return false }
