//go:build !amd64

package kvstore

var dequantSIMD = false

// dequantFast has no assembly kernels on this architecture: the plain Go path runs.
func dequantFast(dst []float32, codes []uint32, sb []uint16, bits, group int) bool { return false }

// dequantQ40Fast has no assembly kernel on this architecture.
func dequantQ40Fast(dst []float32, codes []uint32, d []uint16) bool { return false }
