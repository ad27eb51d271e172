//go:build !amd64

package kvstore

var hadamardSIMD = false

// hadamardFast has no kernel on this architecture: the plain loops run.
func hadamardFast(x []float32, scale float32) bool { return false }
