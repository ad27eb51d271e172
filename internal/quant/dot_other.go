//go:build !amd64

package quant

const simd = false

func dotQ4(x *float32, w *uint32, scales *float32, groups, blocks int) float32 {
	panic("unreachable")
}

func dotQ8(x *float32, w *uint32, scales *float32, groups, blocks int) float32 {
	panic("unreachable")
}

func setSIMD(bool) bool { return false }
