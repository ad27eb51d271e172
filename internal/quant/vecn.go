package quant

import "fmt"

// VecsN is the most input vectors one VecN holds.
const VecsN = 6

// VecN is up to VecsN input vectors prepared together for products with the same packed rows
// (a speculative verification pass, a batch's decode rows): its kernels decode each chunk of
// a row's codes once and multiply it with every vector, where Vec's kernel decodes the
// codes again for each vector. A vector's result is bit-identical to Vec's for that vector
// alone (the same float32 operations in the same order), so a row's value does not depend
// on the vectors computed beside it.
type VecN struct {
	v     [VecsN]Vec
	n     int
	multi bool      // a multi-vector kernel runs (else each vector through Vec's)
	xi    []float32 // the vectors' kernel inputs interleaved chunk by chunk
	si    []float32 // their group sums interleaved in runs of the kernel's width
}

// Prepare readies m for the n vectors of x (n·cols values, one vector after the other),
// rows of cols codes of bits each in groups of group, 1 ≤ n ≤ VecsN. m keeps x: do not change
// it while m is in use. A prepared VecN may be shared by goroutines.
func (m *VecN) Prepare(x []float32, n, bits, group int) error {
	if n < 1 || n > VecsN || len(x)%n != 0 {
		return fmt.Errorf("quant: %d values are not 1 to %d vectors", len(x), VecsN)
	}
	cols := len(x) / n
	for k := range n {
		if err := m.v[k].Prepare(x[k*cols:(k+1)*cols], bits, group); err != nil {
			return err
		}
	}
	m.n = n
	lanes := m.v[0].lanes
	m.multi = n > 1 && lanes > 0 && multiKernel(bits, lanes, n)
	if !m.multi {
		return nil
	}
	// The kernel reads vector k's inputs of chunk c at (c·n + k)·chunk floats, and its
	// sums of run r of groups at (r·n + k)·run (the last run zero-padded).
	chunk := 32 / bits * lanes
	m.xi = grow(m.xi, n*cols)
	for c := 0; c < cols; c += chunk {
		for k := range n {
			copy(m.xi[c*n+k*chunk:c*n+(k+1)*chunk], m.v[k].perm[c:c+chunk])
		}
	}
	run := sumRun(lanes)
	groups := cols / group
	runs := (groups + run - 1) / run
	m.si = grow(m.si, runs*run*n)
	clear(m.si)
	for r := range runs {
		for k := range n {
			copy(m.si[(r*n+k)*run:(r*n+k+1)*run], m.v[k].sums[r*run:min((r+1)*run, groups)])
		}
	}
	return nil
}

// Len is the number of vectors.
func (m *VecN) Len() int { return m.n }

// DotRowsStored computes out[k·stride+r] = x_k · dequantize(row r) for every vector k and
// the consecutive packed rows in packed (rows·Words(cols, bits) words) with their scales and
// biases (rows·groups each, both of one type): vector k's results lie together, stride
// apart. Each value is the one Vec.DotRowsStored gives for that vector and row.
func (m *VecN) DotRowsStored(out []float32, stride int, packed []uint32, scales, biases Scales) {
	v := &m.v[0]
	wpr, groups := Words(len(v.x), v.bits), len(v.x)/v.group
	rows := len(packed) / wpr
	if rows == 0 || m.n == 0 {
		return
	}
	if m.n > 1 && stride < rows {
		panic(fmt.Sprintf("quant: results %d apart for %d rows", stride, rows))
	}
	_ = out[(m.n-1)*stride+rows-1]
	switch {
	case m.multi:
		checkLen(scales, biases, rows*groups)
		dotMulti(m.n, &m.xi[0], &packed[0], scales.ptr(), biases.ptr(), &m.si[0], &out[0], rows, len(v.x), v.group, v.bits, v.lanes, scales.Type, stride)
	default:
		// Each vector through Vec's own kernel, assembly or Go: a Go loop over several
		// vectors would be compiled differently from Vec's (where the compiler fuses
		// multiply-adds, as on arm64), and its results would differ in the last bit.
		for k := range m.n {
			m.v[k].DotRowsStored(out[k*stride:k*stride+rows], packed[:rows*wpr], scales, biases)
		}
	}
}
