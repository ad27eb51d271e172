package quant

import "fmt"

// Vec is an input vector prepared once for dot products with many packed rows, as in
// a matrix-vector product or q·k over a quantized key cache: it holds the vector's
// per-group sums (for the bias term) and, where a SIMD kernel reads codes in another
// order, a copy of the vector in that order.
type Vec struct {
	x, sums, perm []float32
	bits, group   int
	lanes         int // of the decode kernel perm is laid out for (0: none)
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
	v.perm, v.lanes = v.perm[:0], 0
	switch {
	case decodeOn() && bits == 4:
		if v.lanes = decodeLanes(len(x), 8); v.lanes > 0 {
			v.perm = grow(v.perm, len(x))
			permute4(v.perm, x, v.lanes)
		}
	case decodeOn() && bits == 8:
		if v.lanes = decodeLanes(len(x), 4); v.lanes > 0 {
			v.perm = grow(v.perm, len(x))
			permute8(v.perm, x, v.lanes)
		}
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

// permute4 writes x in the order and scaling of the 4-bit decode kernels, whose vectors
// hold L lanes of 32 bits (AVX-512 16, AVX2 8, NEON 4): in each chunk of 8L codes (L words, one per
// lane), code j of every word together, scaled by 2^(-4j), since the kernels convert code
// j in place as q·2^(4j) (code 7 is shifted down, so it keeps its scale).
func permute4(dst, x []float32, L int) {
	n := 8 * L
	for c := 0; c+n <= len(x); c += n {
		xs, d := x[c:c+n:c+n], dst[c:c+n:c+n]
		for i := 0; i < L; i++ {
			w := xs[8*i : 8*i+8 : 8*i+8]
			d[i] = w[0]
			d[L+i] = w[1] * 0x1p-4
			d[2*L+i] = w[2] * 0x1p-8
			d[3*L+i] = w[3] * 0x1p-12
			d[4*L+i] = w[4] * 0x1p-16
			d[5*L+i] = w[5] * 0x1p-20
			d[6*L+i] = w[6] * 0x1p-24
			d[7*L+i] = w[7]
		}
	}
}

// permute8 is permute4 for 8-bit codes: chunks of 4L codes (L words of 4), code j of each
// word scaled by 2^(-8j), code 3 shifted down.
func permute8(dst, x []float32, L int) {
	n := 4 * L
	for c := 0; c+n <= len(x); c += n {
		xs, d := x[c:c+n:c+n], dst[c:c+n:c+n]
		for i := 0; i < L; i++ {
			w := xs[4*i : 4*i+4 : 4*i+4]
			d[i] = w[0]
			d[L+i] = w[1] * 0x1p-8
			d[2*L+i] = w[2] * 0x1p-16
			d[3*L+i] = w[3]
		}
	}
}
