package quant

import (
	"fmt"
	"math"
)

// Vec8 is an input vector quantized to 8-bit integers for products with 4- and 8-bit packed
// rows in integer arithmetic (llama.cpp's CPU backend does the same with its q8 inputs).
// Per group of the weights' group size, x ≈ d·c with d = max|x|/127 and c = round(x/d) in
// [-127, 127]. A product with a packed row is then
//
//	Σ_g d_g·(s_g·Σ c·q + b_g·Σ c)
//
// exact in integers inside a group; the bias term uses Σ c as well (not Σ x), which leaves
// the error Σ (x-x̂)·w instead of the larger Σ (x-x̂)·s·q. The result differs from Vec's by
// the rounding of x to 8 bits, about 1e-2 relative on a model's logits, so it is an option
// of the CPU backend (MLXG_CPU_INT8) and not the reference.
//
// The AVX2 kernel (act8_amd64.s) multiplies a chunk of 32 code bytes with 32 input bytes in
// one VPMADDUBSW: twice the codes per instruction of the float kernel, and a 4-bit chunk
// (64 codes) needs no conversion to float until its group is done.
type Vec8 struct {
	codes []int8 // c, in the kernel's order (act8Order)
	// dc holds, per block of 8 groups, their 8 scales d_g and then their 8 values d_g·Σ c
	// (the bias term's factor), so the kernel finds both at one moving offset.
	dc     []float32
	n      int
	bits   int
	group  int
	kernel bool // the assembly kernel runs
}

// Int8Supported reports whether Vec8 takes rows of bits-bit codes in groups of group: 4 bits
// in groups of 64 or 128, 8 bits in groups of 32, 64 or 128.
func Int8Supported(bits, group int) bool {
	switch bits {
	case 4:
		return group == 64 || group == 128
	case 8:
		return group == 32 || group == 64 || group == 128
	}
	return false
}

// Prepare quantizes x for rows of len(x) codes of bits each in groups of group.
func (v *Vec8) Prepare(x []float32, bits, group int) error {
	if !Int8Supported(bits, group) {
		return fmt.Errorf("quant: 8-bit inputs are not supported for %d-bit codes in groups of %d", bits, group)
	}
	if len(x) == 0 || len(x)%group != 0 {
		return fmt.Errorf("quant: a vector of %d values is not a whole number of groups of %d", len(x), group)
	}
	groups := len(x) / group
	v.n, v.bits, v.group = len(x), bits, group
	v.kernel = int8Kernel()
	if cap(v.codes) < len(x) {
		v.codes = make([]int8, len(x))
	}
	v.codes = v.codes[:len(x)]
	v.dc = grow(v.dc, 16*((groups+7)/8))
	clear(v.dc)
	var c [128]int8
	for g := 0; g < groups; g++ {
		xs := x[g*group : (g+1)*group]
		var amax float32
		for _, f := range xs {
			amax = max(amax, abs32(f))
		}
		var d, id float32
		if amax > 0 {
			d = amax / 127
			id = 127 / amax
		}
		sum := 0
		for j, f := range xs {
			q := int8(min(max(rint(f*id), -127), 127))
			c[j] = q
			sum += int(q)
		}
		v.dc[dcIndex(g)] = d
		v.dc[dcIndex(g)+8] = d * float32(sum)
		act8Order(v.codes[g*group:(g+1)*group], c[:group], bits)
	}
	return nil
}

// dcIndex is where group g's d_g sits in Vec8.dc (its d_g·Σ c sits 8 further on).
func dcIndex(g int) int { return 16*(g/8) + g%8 }

// act8Order writes one group's codes in the order the kernel reads them: for 4-bit rows, each
// chunk of 64 codes (32 bytes of a row, byte b holding codes 2b and 2b+1 in its low and high
// nibble) as its 32 even-numbered codes and then its 32 odd-numbered ones, so that a byte's
// low nibbles meet the first half and its high nibbles the second; 8-bit rows in order.
func act8Order(dst, c []int8, bits int) {
	if bits != 4 {
		copy(dst, c)
		return
	}
	for k := 0; k < len(c); k += 64 {
		for b := 0; b < 32; b++ {
			dst[k+b] = c[k+2*b]
			dst[k+32+b] = c[k+2*b+1]
		}
	}
}

// DotRowsStored computes out[r] = x̂ · dequantize(row r) for len(out) consecutive packed rows
// with their scales and biases (len(out)·groups each). Like Vec.DotRowsStored, a row's result
// depends only on that row and the vector, never on the rows around it in the call.
func (v *Vec8) DotRowsStored(out []float32, packed []uint32, scales, biases Scales) {
	rows, groups := len(out), v.n/v.group
	if rows == 0 {
		return
	}
	wpr := Words(v.n, v.bits)
	_ = packed[rows*wpr-1]
	checkLen(scales, biases, rows*groups)
	if v.kernel {
		dotInt8(&v.codes[0], &v.dc[0], &packed[0], scales.ptr(), biases.ptr(), &out[0], rows, groups, v.bits, v.group, scales.Type)
		return
	}
	for r := range out {
		out[r] = v.dotRow(packed[r*wpr:(r+1)*wpr], scales, biases, r*groups)
	}
}

// dotRow is the plain Go kernel: one row, its scales and biases starting at index g0.
func (v *Vec8) dotRow(packed []uint32, scales, biases Scales, g0 int) float32 {
	var total float32
	for g := 0; g < v.n/v.group; g++ {
		c := v.codes[g*v.group : (g+1)*v.group]
		isum := 0
		if v.bits == 4 {
			for k := 0; k < len(c); k += 64 {
				for b := 0; b < 32; b++ {
					w := codeByte(packed, (g*v.group+k)/2+b)
					isum += int(w&15)*int(c[k+b]) + int(w>>4)*int(c[k+32+b])
				}
			}
		} else {
			for j := range c {
				isum += int(codeByte(packed, g*v.group+j)) * int(c[j])
			}
		}
		d, csum := v.dc[dcIndex(g)], v.dc[dcIndex(g)+8]
		total += float32(scales.At(g0+g)*d)*float32(isum) + biases.At(g0+g)*csum
	}
	return total
}

// codeByte is byte i of a packed row (the words are little-endian).
func codeByte(packed []uint32, i int) byte { return byte(packed[i/4] >> (8 * uint(i%4))) }

// act8Reference is Vec8's product in float64 (tests): Σ_g d_g·(s_g·Σ c·q + b_g·Σ c) from the
// codes in natural order c and the groups' scales d, and Σ of the terms' magnitudes.
func act8Reference(c []int8, d []float32, packed []uint32, scales, biases Scales, bits, group int) (sum, mag float64) {
	for g := range d {
		var iq, ic int
		var aq float64
		for j := g * group; j < (g+1)*group; j++ {
			q := int(Code(packed, j, bits))
			iq += q * int(c[j])
			ic += int(c[j])
			aq += math.Abs(float64(q * int(c[j])))
		}
		s, b := float64(scales.At(g)), float64(biases.At(g))
		sum += float64(d[g]) * (s*float64(iq) + b*float64(ic))
		mag += float64(d[g]) * (math.Abs(s)*aq + math.Abs(b)*math.Abs(float64(ic)))
	}
	return sum, mag
}

// Int8Kernel reports whether Vec8 runs in assembly on this machine (else in plain Go, which
// is much slower than Vec's kernels).
func Int8Kernel() bool { return int8Kernel() }
