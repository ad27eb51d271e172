package quant

import (
	"fmt"
	"math"
)

// fp4 holds the values of the 16 e2m1 codes (MLX's FP4_LUT): sign bit 3, then
// 0, 0.5, 1, 1.5, 2, 3, 4, 6.
var fp4 = [16]float32{0, 0.5, 1, 1.5, 2, 3, 4, 6, -0, -0.5, -1, -1.5, -2, -3, -4, -6}

// FP4 returns the value of an e2m1 code (low 4 bits of c).
func FP4(c uint8) float32 { return fp4[c&15] }

// E4M3 decodes an fp8 e4m3 byte as MLX does: the 7 magnitude bits placed in an fp16's
// exponent and mantissa, times 2^8 (which also handles subnormals).
func E4M3(c uint8) float32 {
	h := uint16(c&127) << 7
	v := f16(h) * 256
	if c&128 != 0 {
		return -v
	}
	return v
}

// E8M0 decodes an e8m0 scale byte: 2^(c-127), with 0 read as MLX reads it (bf16 bits 0x40).
func E8M0(c uint8) float32 {
	if c == 0 {
		return math.Float32frombits(0x40 << 16)
	}
	return math.Float32frombits(uint32(c) << 23)
}

// FPParams returns the fixed bits and group size of a float mode.
func FPParams(m Mode) (bits, group int, err error) {
	switch m {
	case MXFP4:
		return 4, 32, nil
	case MXFP8:
		return 8, 32, nil
	case NVFP4:
		return 4, 16, nil
	}
	return 0, 0, fmt.Errorf("quant: %q is not a float quantization mode (mxfp4, mxfp8, nvfp4)", m)
}

// FPScales decodes a float mode's uint8 scales to float32.
func FPScales(m Mode, raw []uint8) ([]float32, error) {
	out := make([]float32, len(raw))
	return out, FPScalesInto(m, out, raw)
}

// FPScalesInto decodes a float mode's uint8 scales into dst (at least as long as raw):
// for scales read into a reused buffer, a streamed expert's.
func FPScalesInto(m Mode, dst []float32, raw []uint8) error {
	if _, _, err := FPParams(m); err != nil {
		return err
	}
	if len(dst) < len(raw) {
		return fmt.Errorf("quant: %d scales decoded into room for %d", len(raw), len(dst))
	}
	for i, c := range raw {
		if m == NVFP4 {
			dst[i] = E4M3(c)
		} else {
			dst[i] = E8M0(c)
		}
	}
	return nil
}

// DequantizeFP expands a rows×cols matrix in a float mode (packed codes, uint8 scales).
func DequantizeFP(m Mode, packed []uint32, scales []uint8, rows, cols int) ([]float32, error) {
	bits, group, err := FPParams(m)
	if err != nil {
		return nil, err
	}
	if cols <= 0 || cols%group != 0 {
		return nil, fmt.Errorf("quant: a %s row of %d values is not a positive multiple of its group size %d", m, cols, group)
	}
	wpr, gpr := Words(cols, bits), cols/group
	if len(packed) != rows*wpr || len(scales) != rows*gpr {
		return nil, fmt.Errorf("quant: a %d×%d %s matrix needs %d words and %d scales; got %d and %d", rows, cols, m, rows*wpr, rows*gpr, len(packed), len(scales))
	}
	s, _ := FPScales(m, scales)
	out := make([]float32, rows*cols)
	for r := 0; r < rows; r++ {
		DequantizeFPRow(out[r*cols:(r+1)*cols], packed[r*wpr:(r+1)*wpr], s[r*gpr:(r+1)*gpr], bits, group)
	}
	return out, nil
}

// DequantizeFPRow expands one row of a float mode with already decoded scales.
func DequantizeFPRow(dst []float32, packed []uint32, scales []float32, bits, group int) {
	for i := range dst {
		c := Code(packed, i, bits)
		var v float32
		if bits == 4 {
			v = fp4[c]
		} else {
			v = E4M3(uint8(c))
		}
		dst[i] = scales[i/group] * v
	}
}

// f16 converts IEEE half bits to float32 (kept local so quant has no dependencies).
func f16(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 31
	mant := uint32(h) & 1023
	switch {
	case exp == 0 && mant == 0:
		return math.Float32frombits(sign)
	case exp == 0:
		return float32(mant) / 1024 / 16384 * sign1(sign)
	case exp == 31:
		return math.Float32frombits(sign | 0xff<<23 | mant<<13)
	}
	return math.Float32frombits(sign | (exp+112)<<23 | mant<<13)
}

func sign1(sign uint32) float32 {
	if sign != 0 {
		return -1
	}
	return 1
}
