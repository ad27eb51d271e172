//go:build !amd64

package quant

import "unsafe"

// multiKernel is false: VecN runs each vector through Vec's kernel on this architecture.
func multiKernel(b, lanes, n int) bool { return false }

// VecsFor is the most vectors one VecN should hold for rows of cols codes of bits each.
func VecsFor(cols, bits int) int { return 4 }

func sumRun(int) int { return 8 }

func dotMulti(n int, x *float32, w *uint32, scales, biases unsafe.Pointer, sums, out *float32, rows, cols, group, b, lanes int, st ScaleType, stride int) {
	panic("unreachable")
}
