package quant

import "math"

// MXFP4 is MLX's "mxfp4" mode, the format gpt-oss's experts are trained and shipped in:
// groups of 32 values along a row, each an e2m1 code (4 bits, MLX's packing: code i at
// bits 4i of the row's little-endian bit stream) times the group's shared e8m0 scale
// (a byte e, 2^(e-127)). OpenAI's checkpoints store the same bytes ("_blocks", two codes
// a byte, the low nibble first; "_scales"), so they convert without a requantization.

// QuantizeMXFP4Row quantizes src (a multiple of 32 long) as MLX's quantize does in
// mxfp4 mode: per group, the scale 2^round(log2(max|w|/6)) (2^0 for a group of zeros),
// and per value the nearest e2m1 value of w/scale, the lowest code on a tie (values
// beyond ±6 become ±6). dst gets len(src)/8 words (overwritten), scales len(src)/32 bytes.
func QuantizeMXFP4Row(dst []uint32, scales []uint8, src []float32) {
	clear(dst[:len(src)/8])
	for g := 0; g*32 < len(src); g++ {
		vals := src[g*32 : (g+1)*32]
		var amax float32
		for _, v := range vals {
			amax = max(amax, abs32(v))
		}
		s := amax / 6
		e := 0
		if s != 0 {
			e = int(math.RoundToEven(math.Log2(float64(s))))
		}
		e = min(max(e, -127), 128)
		scales[g] = uint8(e + 127)
		p := float32(math.Ldexp(1, e))
		for j, v := range vals {
			x := v / p
			best, bestDiff := 0, float32(math.Inf(1))
			for c, f := range fp4 {
				if d := abs32(x - f); d < bestDiff {
					best, bestDiff = c, d
				}
			}
			putCode(dst, g*32+j, 4, uint32(best))
		}
	}
}

// fp4Pairs holds, for each byte of packed codes, the values of its low and high codes.
var fp4Pairs = func() (t [256][2]float32) {
	for b := range t {
		t[b] = [2]float32{fp4[b&15], fp4[b>>4]}
	}
	return t
}()

// DotMXFP4Row is x · row for one packed mxfp4 row (len(x) values, a multiple of 32) with
// its decoded scales (E8M0): the decode kernel of mxfp4 products, which reads the codes a
// byte (two values) at a time through a table and scales each group's sum once.
func DotMXFP4Row(x []float32, packed []uint32, scales []float32) float32 {
	var total float32
	for g := 0; g*32 < len(x); g++ {
		xs := x[g*32 : (g+1)*32]
		words := packed[g*4 : (g+1)*4]
		var s0, s1 float32
		for w, word := range words {
			xw := xs[w*8 : (w+1)*8]
			for b := 0; b < 4; b++ {
				pair := &fp4Pairs[uint8(word>>(8*b))]
				s0 += xw[2*b] * pair[0]
				s1 += xw[2*b+1] * pair[1]
			}
		}
		total += scales[g] * (s0 + s1)
	}
	return total
}
