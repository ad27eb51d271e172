package quant

import "fmt"

// Vec8 is up to 4 input vectors quantized to 8-bit integers for products with 4-bit packed
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
// The AVX2 kernel (act8_amd64.s) multiplies 32 codes with 32 input bytes in one VPMADDUBSW
// and converts to float once per group, where the float kernel converts every code; it
// loads and splits a chunk of a row once for all the vectors. 8-bit rows are left to Vec:
// split into nibbles the same way, they gain nothing over the float kernel.
type Vec8 struct {
	codes []int8 // c of every vector, in the kernel's order (order)
	// dc holds, per block of 8 groups and per vector, the 8 groups' d_g and then their
	// d_g·Σ c (the bias term's factor), so the kernel finds both at one moving offset.
	dc     []float32
	n      int // values per vector
	count  int // vectors
	bits   int
	group  int
	kernel bool // the assembly kernel runs
}

// Int8Supported reports whether Vec8 takes rows of bits-bit codes in groups of group: 4 bits
// in groups of 64 or 128.
func Int8Supported(bits, group int) bool { return bits == 4 && (group == 64 || group == 128) }

// Int8Vectors is how many vectors one Vec8 holds: the kernel reads each chunk of a row once
// for all of them.
const Int8Vectors = 4

// Prepare quantizes x for rows of len(x) codes of bits each in groups of group.
func (v *Vec8) Prepare(x []float32, bits, group int) error { return v.PrepareN(x, 1, bits, group) }

// PrepareN quantizes count vectors, x holding them one after the other, for products with
// rows of len(x)/count codes (1 <= count <= Int8Vectors).
func (v *Vec8) PrepareN(x []float32, count, bits, group int) error {
	if !Int8Supported(bits, group) {
		return fmt.Errorf("quant: 8-bit inputs are not supported for %d-bit codes in groups of %d", bits, group)
	}
	if count < 1 || count > Int8Vectors || len(x)%count != 0 {
		return fmt.Errorf("quant: %d vectors of 8-bit inputs (%d values): want 1 to %d of equal length", count, len(x), Int8Vectors)
	}
	n := len(x) / count
	if n == 0 || n%group != 0 {
		return fmt.Errorf("quant: a vector of %d values is not a whole number of groups of %d", n, group)
	}
	groups := n / group
	v.n, v.count, v.bits, v.group = n, count, bits, group
	v.kernel = int8Kernel()
	if cap(v.codes) < len(x) {
		v.codes = make([]int8, len(x))
	}
	v.codes = v.codes[:len(x)]
	v.dc = grow(v.dc, 16*count*((groups+7)/8))
	clear(v.dc)
	for k := 0; k < count; k++ {
		for g := 0; g < groups; g++ {
			d, sum := v.round(k, g, x[k*n+g*group:k*n+(g+1)*group])
			i := v.dcIndex(k, g)
			v.dc[i] = d
			v.dc[i+8] = d * float32(sum)
		}
	}
	return nil
}

// round rounds vector k's group g, xs, to codes c = round(x/d) with d = max|x|/127 (0 for a
// group of zeros), stores them in the kernel's order (order) and returns d and Σ c. The
// assembly form does the same operations, so the codes are the same either way.
func (v *Vec8) round(k, g int, xs []float32) (d float32, sum int) {
	var amax float32
	if v.kernel {
		amax = absMax(&xs[0], len(xs))
	} else {
		for _, f := range xs {
			amax = max(amax, abs32(f))
		}
	}
	var id float32
	if amax > 0 {
		d = amax / 127
		id = 127 / amax
	}
	if v.kernel {
		return d, int(round8(&xs[0], len(xs)/64, id, &v.codes[g*v.group*v.count+64*k], 64*v.count))
	}
	var c [128]int8
	for j, f := range xs {
		q := int8(min(max(rint(f*id), -127), 127))
		c[j] = q
		sum += int(q)
	}
	v.order(k, g, c[:len(xs)])
	return d, sum
}

// dcIndex is where vector k's d_g sits in dc (its d_g·Σ c sits 8 further on).
func (v *Vec8) dcIndex(k, g int) int { return 16*(v.count*(g/8)+k) + g%8 }

// order writes vector k's codes c of group g where the kernel reads them: the vectors of a
// group one after the other, chunk by chunk, each chunk of 64 codes (32 bytes of a row,
// byte b holding codes 2b and 2b+1 in its low and high nibble) as its 32 even-numbered
// codes and then its 32 odd-numbered ones, so that a byte's low nibbles meet the first
// half and its high nibbles the second.
func (v *Vec8) order(k, g int, c []int8) {
	base := g * v.group * v.count
	for ch := 0; ch < len(c); ch += 64 {
		dst := v.codes[base+ch*v.count+64*k:]
		for b := 0; b < 32; b++ {
			dst[b] = c[ch+2*b]
			dst[32+b] = c[ch+2*b+1]
		}
	}
}

// code is vector k's code j of group g, wherever order put it.
func (v *Vec8) code(k, g, j int) int8 {
	base := g * v.group * v.count
	i := base + j/64*64*v.count + 64*k + j%64/2
	if j%2 == 1 {
		i += 32
	}
	return v.codes[i]
}

// DotRowsStored computes out[k·stride+r] = x̂_k · dequantize(row r) for the consecutive
// packed rows in packed (rows·Words(n, bits) words) with their scales and biases
// (rows·groups each): vector k's results for the rows lie together, stride apart (any stride
// for one vector). Like Vec.DotRowsStored, a result depends only on its row and vector,
// never on the rows or vectors around them in the call.
func (v *Vec8) DotRowsStored(out []float32, stride int, packed []uint32, scales, biases Scales) {
	wpr, groups := Words(v.n, v.bits), v.n/v.group
	rows := len(packed) / wpr
	if rows == 0 {
		return
	}
	if v.count == 1 {
		stride = rows
	}
	if stride < rows {
		panic(fmt.Sprintf("quant: results %d apart for %d rows", stride, rows))
	}
	_ = out[(v.count-1)*stride+rows-1]
	checkLen(scales, biases, rows*groups)
	if v.kernel {
		dotInt8(&v.codes[0], &v.dc[0], &packed[0], scales.ptr(), biases.ptr(), &out[0], stride, rows, groups, v.group, v.count, scales.Type)
		return
	}
	for r := 0; r < rows; r++ {
		for k := 0; k < v.count; k++ {
			out[k*stride+r] = v.dotRow(k, packed[r*wpr:(r+1)*wpr], scales, biases, r*groups)
		}
	}
}

// dotRow is the plain Go kernel: vector k with one row, its scales and biases starting at
// index g0.
func (v *Vec8) dotRow(k int, packed []uint32, scales, biases Scales, g0 int) float32 {
	var total float32
	for g := 0; g < v.n/v.group; g++ {
		isum := 0
		for j := 0; j < v.group; j++ {
			isum += int(Code(packed, g*v.group+j, v.bits)) * int(v.code(k, g, j))
		}
		i := v.dcIndex(k, g)
		d, csum := v.dc[i], v.dc[i+8]
		total += float32(scales.At(g0+g)*d)*float32(isum) + biases.At(g0+g)*csum
	}
	return total
}

// Int8Kernel reports whether Vec8 runs in assembly on this machine (else in plain Go, which
// is much slower than Vec's kernels).
func Int8Kernel() bool { return int8Kernel() }
