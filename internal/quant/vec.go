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
	if simd && bits == 4 {
		// The AVX2 kernel expands 8 bytes into 8 low and 8 high nibbles: codes
		// 0,2,..,14 then 1,3,..,15 of each run of 16.
		v.perm = grow(v.perm, len(x))
		for b := 0; b < len(x); b += 16 {
			for j := 0; j < 8; j++ {
				v.perm[b+j] = x[b+2*j]
				v.perm[b+8+j] = x[b+2*j+1]
			}
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
