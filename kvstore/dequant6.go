package kvstore

import "github.com/mlxg/mlxg/internal/half"

// dequant6 expands an affine row of 6-bit codes (MLX's bit stream: code k at bits
// 6k..6k+5, 16 codes in 3 words) with interleaved fp16 (scale, bias) pairs sb into dst,
// in Go on every architecture: the tile path's decode of 6-bit rows (prefill, and
// decode where no fused kernel runs, as on arm64), whose dot products are SIMD.
// It unpacks 4 codes from each 24 bits with constant shifts, where quant.Codes walks a
// bit stream of any width code by code. The arithmetic per element is the plain path's
// (scale·code + bias).
func dequant6(dst []float32, codes []uint32, sb []uint16, group int) {
	for g := 0; g < len(dst)/group; g++ {
		sc, bi := half.F16ToF32(sb[2*g]), half.F16ToF32(sb[2*g+1])
		d := dst[g*group : (g+1)*group]
		ws := codes[g*group*6/32 : (g+1)*group*6/32]
		for i := 0; i+16 <= len(d); i += 16 {
			w := ws[i*6/32 : i*6/32+3 : i*6/32+3]
			o := d[i : i+16 : i+16]
			x0 := w[0] & 0xffffff
			x1 := w[0]>>24 | (w[1]&0xffff)<<8
			x2 := w[1]>>16 | (w[2]&0xff)<<16
			x3 := w[2] >> 8
			for j, x := range [4]uint32{x0, x1, x2, x3} {
				o[4*j] = sc*float32(x&63) + bi
				o[4*j+1] = sc*float32(x>>6&63) + bi
				o[4*j+2] = sc*float32(x>>12&63) + bi
				o[4*j+3] = sc*float32(x>>18) + bi
			}
		}
	}
}
