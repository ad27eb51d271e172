package quant

import "fmt"

// Vec is an input vector prepared once for dot products with many packed rows, as in
// a matrix-vector product or q·k over a quantized key cache: it holds the vector's
// per-group sums (for the bias term) and, where a SIMD kernel reads codes in another
// order, a copy of the vector in that order.
type Vec struct {
	x, sums, perm []float32
	bits, group   int
}

// Prepare readies v for rows of len(x) codes of bits each in groups of group. v keeps
// x (not a copy): do not change it while v is in use. A prepared Vec may be shared by
// goroutines.
func (v *Vec) Prepare(x []float32, bits, group int) error {
	if err := CheckAffine(bits, group); err != nil {
		return err
	}
	if len(x)%group != 0 {
		return fmt.Errorf("quant: a vector of %d values is not a whole number of groups of %d", len(x), group)
	}
	v.x, v.bits, v.group = x, bits, group
	v.sums = grow(v.sums, len(x)/group)
	GroupSums(v.sums, x, group)
	v.perm = v.perm[:0]
	switch {
	case simd && bits == 4 && len(x)%64 == 0:
		v.perm = grow(v.perm, len(x))
		permute4(v.perm, x)
	case simd && bits == 8:
		v.perm = grow(v.perm, len(x))
		permute8(v.perm, x)
	}
	return nil
}

// Dot returns x · dequantize(row) for one packed row with its scales and biases.
func (v *Vec) Dot(packed []uint32, scales, biases []float32) float32 {
	var out [1]float32
	v.DotRows(out[:], packed, scales, biases)
	return out[0]
}

// DotRows computes out[r] = x · dequantize(row r) for len(out) consecutive packed rows,
// with their scales and biases (len(out)·groups each).
func (v *Vec) DotRows(out []float32, packed []uint32, scales, biases []float32) {
	v.DotRowsStored(out, packed, F32Scales(scales), F32Scales(biases))
}

func grow(b []float32, n int) []float32 {
	if cap(b) < n {
		return make([]float32, n)
	}
	return b[:n]
}

// permute4 writes x in the order and scaling of the 4-bit kernel: in each chunk of 64
// codes (8 words, one per lane), code j of every word (lanes 0..7) together, scaled by
// 2^(-4j) since the kernel converts code j in place as q·2^(4j) (code 7 is shifted down).
func permute4(dst, x []float32) {
	for c := 0; c+64 <= len(x); c += 64 {
		xs, d := x[c:c+64:c+64], dst[c:c+64:c+64]
		for i := 0; i < 8; i++ {
			w := xs[8*i : 8*i+8 : 8*i+8]
			d[i] = w[0]
			d[8+i] = w[1] * 0x1p-4
			d[16+i] = w[2] * 0x1p-8
			d[24+i] = w[3] * 0x1p-12
			d[32+i] = w[4] * 0x1p-16
			d[40+i] = w[5] * 0x1p-20
			d[48+i] = w[6] * 0x1p-24
			d[56+i] = w[7]
		}
	}
}

// permute8 is permute4 for 8-bit codes: chunks of 32 (8 words of 4 codes), code j of each
// word scaled by 2^(-8j), code 3 shifted down.
func permute8(dst, x []float32) {
	for c := 0; c+32 <= len(x); c += 32 {
		xs, d := x[c:c+32:c+32], dst[c:c+32:c+32]
		for i := 0; i < 8; i++ {
			w := xs[4*i : 4*i+4 : 4*i+4]
			d[i] = w[0]
			d[8+i] = w[1] * 0x1p-8
			d[16+i] = w[2] * 0x1p-16
			d[24+i] = w[3]
		}
	}
}
