package quant

import "unsafe"

// The integer kernels of act8_amd64.s, one per bit width and group size: for rows
// consecutive packed rows, out[r] = x̂ · the dequantized row r (see Vec8).
//
//go:noescape
func dotQ4Int8G64(x *int8, dc *float32, w *uint32, scales, biases unsafe.Pointer, out *float32, rows, groups, st int)

//go:noescape
func dotQ4Int8G128(x *int8, dc *float32, w *uint32, scales, biases unsafe.Pointer, out *float32, rows, groups, st int)

//go:noescape
func dotQ8Int8G32(x *int8, dc *float32, w *uint32, scales, biases unsafe.Pointer, out *float32, rows, groups, st int)

//go:noescape
func dotQ8Int8G64(x *int8, dc *float32, w *uint32, scales, biases unsafe.Pointer, out *float32, rows, groups, st int)

//go:noescape
func dotQ8Int8G128(x *int8, dc *float32, w *uint32, scales, biases unsafe.Pointer, out *float32, rows, groups, st int)

// int8Kernel reports whether Vec8's assembly kernels run (AVX2; SetSIMD turns them off).
func int8Kernel() bool { return simd }

// dotInt8 runs the kernel for bits and group (Int8Supported).
func dotInt8(x *int8, dc *float32, w *uint32, scales, biases unsafe.Pointer, out *float32, rows, groups, bits, group int, st ScaleType) {
	k := dotQ8Int8G32
	switch {
	case bits == 4 && group == 64:
		k = dotQ4Int8G64
	case bits == 4:
		k = dotQ4Int8G128
	case group == 64:
		k = dotQ8Int8G64
	case group == 128:
		k = dotQ8Int8G128
	}
	k(x, dc, w, scales, biases, out, rows, groups, int(st))
}
