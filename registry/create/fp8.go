package create

import (
	"fmt"
	"math"
	"strings"

	"github.com/mlxg/mlxg/registry/safetensors"
)

// FP8 checkpoints (quantization_config's quant_method "fp8", as Mistral ships Ministral 3
// and Devstral 2): each quantized linear's weight is F8_E4M3 beside a weight_scale_inv, a
// float32 scale per tensor (weight_block_size null) or per block of weight_block_size
// [rows, cols]; the weight is code·scale, as transformers' FP8Linear dequantizes it and
// mlx-lm's sanitize does. The static activation scales (activation_scale) are for FP8
// matmuls only and are dropped.

// fp8Dropped reports a tensor of an FP8 checkpoint that the conversion leaves out.
func fp8Dropped(name string) bool {
	return strings.HasSuffix(name, ".weight_scale_inv") || strings.HasSuffix(name, ".activation_scale")
}

// e4m3 is the value of each FP8 E4M3 (fn) byte: sign, 4 exponent bits of bias 7, 3
// mantissa bits; no infinities, 0x7f and 0xff are NaN.
var e4m3 = func() (t [256]float32) {
	for b := range t {
		sign := float32(1)
		if b&0x80 != 0 {
			sign = -1
		}
		exp, man := (b>>3)&0xf, b&7
		switch {
		case exp == 15 && man == 7:
			t[b] = float32(math.NaN())
		case exp == 0:
			t[b] = sign * float32(man) / 8 * float32(math.Ldexp(1, -6))
		default:
			t[b] = sign * (1 + float32(man)/8) * float32(math.Ldexp(1, exp-7))
		}
	}
	return t
}()

// fp8Rows is the rows function of the F8_E4M3 weight n (rows × cols), dequantized with its
// weight_scale_inv.
func fp8Rows(ck *safetensors.Checkpoint, n string, t *safetensors.Tensor, dt safetensors.DType) (func(rows, cols int, fn func(r0 int, vals []float32)), error) {
	st, ok := ck.Tensor(n + "_scale_inv")
	if !ok || len(t.Shape) != 2 {
		return nil, fmt.Errorf("create: FP8 tensor %s (shape %v) has no %s_scale_inv beside it", n, t.Shape, n)
	}
	scales, err := st.Float32s()
	if err != nil {
		return nil, fmt.Errorf("create: %s_scale_inv: %w", n, err)
	}
	R, C := t.Shape[0], t.Shape[1]
	// The blocks' size: one block (a scale per tensor), or as many as the scale's shape says.
	sr, sc := 1, 1
	if len(scales) > 1 {
		if len(st.Shape) != 2 {
			return nil, fmt.Errorf("create: %s_scale_inv has shape %v: want one scale, or a 2-D grid of blocks", n, st.Shape)
		}
		sr, sc = st.Shape[0], st.Shape[1]
	}
	br, bc := (R+sr-1)/sr, (C+sc-1)/sc
	return func(rows, cols int, fn func(r0 int, vals []float32)) {
		const block = 64
		buf := make([]float32, block*C)
		for r0 := 0; r0 < R; r0 += block {
			n := min(block, R-r0)
			vals := buf[:n*C]
			for i := range n {
				row := t.Data[(r0+i)*C : (r0+i+1)*C]
				srow := scales[((r0+i)/br)*sc : ((r0+i)/br+1)*sc]
				for j, b := range row {
					vals[i*C+j] = e4m3[b] * srow[j/bc]
				}
			}
			roundTo(vals, dt)
			fn(r0, vals)
		}
	}, nil
}
