//go:build !amd64 && !arm64

package quant

import "unsafe"

const simd = false

func decodeOn() bool { return false }

func decodeLanes(n, cpl int) int { return 0 }

// SetAVX512 reports false: there are no assembly kernels on this architecture.
func SetAVX512(bool) bool { return false }

func dotQ4Rows(x *float32, w *uint32, scales, biases unsafe.Pointer, sums, out *float32, rows, n, group, lanes int, st ScaleType) {
	panic("unreachable")
}

func dotQ8Rows(x *float32, w *uint32, scales, biases unsafe.Pointer, sums, out *float32, rows, n, group, lanes int, st ScaleType) {
	panic("unreachable")
}

// SetSIMD reports false: there are no assembly kernels on this architecture.
func SetSIMD(bool) bool { return false }

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
func decodeKernel() string { return "go" }
