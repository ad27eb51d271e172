package kvstore

import "golang.org/x/sys/cpu"

// dequantSIMD reports whether the AVX2+F16C dequantizers in dequant_amd64.s run (tests
// turn it off to check the plain Go path against them).
var dequantSIMD = cpu.X86.HasAVX2 && cpu.X86.HasF16C

// dequant8 expands groups groups of group 8-bit codes with interleaved fp16 (scale,
// bias) pairs sb.
//
//go:noescape
func dequant8(dst *float32, codes *uint32, sb *uint16, groups, group int)

// dequant4 is dequant8 for 4-bit codes; shifts is nibbleShifts.
//
//go:noescape
func dequant4(dst *float32, codes *uint32, sb *uint16, groups, group int, shifts *[8]uint32)

// dequantQ40 expands blocks q4_0 blocks of 32 codes with fp16 scales d.
//
//go:noescape
func dequantQ40(dst *float32, codes *uint32, d *uint16, blocks int, shifts *[8]uint32)

var nibbleShifts = [8]uint32{0, 4, 8, 12, 16, 20, 24, 28}

// dequantFast expands an affine row of 4- or 8-bit codes (scales and biases sb as
// stored) with the assembly kernels and reports whether it did.
func dequantFast(dst []float32, codes []uint32, sb []uint16, bits, group int) bool {
	if !dequantSIMD || len(dst) == 0 {
		return false
	}
	groups := len(dst) / group
	_ = sb[2*groups-1]
	switch bits {
	case 8:
		_ = codes[len(dst)/4-1]
		dequant8(&dst[0], &codes[0], &sb[0], groups, group)
	case 4:
		_ = codes[len(dst)/8-1]
		dequant4(&dst[0], &codes[0], &sb[0], groups, group, &nibbleShifts)
	default:
		return false
	}
	return true
}

// dequantQ40Fast expands a q4_0 row with the assembly kernel and reports whether it did.
func dequantQ40Fast(dst []float32, codes []uint32, d []uint16) bool {
	if !dequantSIMD || len(dst) == 0 {
		return false
	}
	_ = codes[len(dst)/8-1]
	_ = d[len(dst)/32-1]
	dequantQ40(&dst[0], &codes[0], &d[0], len(dst)/32, &nibbleShifts)
	return true
}
