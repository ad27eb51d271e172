//go:build !amd64

package quant

import "unsafe"

// int8Kernel is false: Vec8 has assembly on amd64 only; elsewhere it runs in plain Go.
func int8Kernel() bool { return false }

func dotInt8(x *int8, dc *float32, w *uint32, scales, biases unsafe.Pointer, out *float32, stride, rows, groups, group, count int, st ScaleType) {
	panic("unreachable")
}

func absMax(x *float32, n int) float32 { panic("unreachable") }

func round8(x *float32, chunks int, id float32, dst *int8, stride int) int32 { panic("unreachable") }
