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
	case decodeOn() && v.lanes > 0 || m.n == 1:
		for k := range m.n {
			m.v[k].DotRowsStored(out[k*stride:k*stride+rows], packed[:rows*wpr], scales, biases)
		}
	default:
		m.dotRowsGo(out, stride, packed[:rows*wpr], scales, biases)
	}
}

// dotRowsGo is the plain Go kernel for several vectors: each row's codes decoded once, then
// every vector's sums exactly as DotRow forms them.
func (m *VecN) dotRowsGo(out []float32, stride int, packed []uint32, scales, biases Scales) {
	v0 := &m.v[0]
	bits, group := v0.bits, v0.group
	wpr, groups := Words(len(v0.x), bits), len(v0.x)/group
	checkLen(scales, biases, len(packed)/wpr*groups)
	var buf [512]float32
	sb := buf[:]
	if 2*groups > len(buf) {
		sb = make([]float32, 2*groups)
	}
	s, b := sb[:groups], sb[groups:2*groups]
	for r := 0; r < len(packed)/wpr; r++ {
		scales.widen(s, r*groups)
		biases.widen(b, r*groups)
		var tot [VecsN]float32
		m.dotRowGo(&tot, packed[r*wpr:(r+1)*wpr], s, b)
		for k := range m.n {
			out[k*stride+r] = tot[k]
		}
	}
}

// dotRowGo is DotRow for every vector of m with one row (scales and biases widened).
func (m *VecN) dotRowGo(tot *[VecsN]float32, packed []uint32, scales, biases []float32) {
	v0 := &m.v[0]
	bits, group, n := v0.bits, v0.group, m.n
	switch bits {
	case 4:
		wpg := group / 8
		for g := range scales {
			ws := packed[g*wpg : (g+1)*wpg]
			var acc [VecsN]float32
			for i, w := range ws {
				c0, c1, c2, c3 := float32(w&15), float32(w>>4&15), float32(w>>8&15), float32(w>>12&15)
				c4, c5, c6, c7 := float32(w>>16&15), float32(w>>20&15), float32(w>>24&15), float32(w>>28)
				for k := range n {
					xs := m.v[k].x[g*group+i*8 : g*group+i*8+8 : g*group+i*8+8]
					acc[k] += xs[0]*c0 + xs[1]*c1 +
						xs[2]*c2 + xs[3]*c3 +
						xs[4]*c4 + xs[5]*c5 +
						xs[6]*c6 + xs[7]*c7
				}
			}
			for k := range n {
				tot[k] += scales[g]*acc[k] + biases[g]*m.v[k].sums[g]
			}
		}
	case 8:
		wpg := group / 4
		for g := range scales {
			ws := packed[g*wpg : (g+1)*wpg]
			var acc [VecsN]float32
			for i, w := range ws {
				c0, c1, c2, c3 := float32(w&255), float32(w>>8&255), float32(w>>16&255), float32(w>>24)
				for k := range n {
					xs := m.v[k].x[g*group+i*4 : g*group+i*4+4 : g*group+i*4+4]
					acc[k] += xs[0]*c0 + xs[1]*c1 +
						xs[2]*c2 + xs[3]*c3
				}
			}
			for k := range n {
				tot[k] += scales[g]*acc[k] + biases[g]*m.v[k].sums[g]
			}
		}
	default:
		var codes [128]float32
		for g := range scales {
			c := codes[:group]
			Codes(c, packed, g*group, bits)
			for k := range n {
				xg := m.v[k].x[g*group : (g+1)*group]
				var acc float32
				for j, q := range c {
					acc += xg[j] * q
				}
				tot[k] += scales[g]*acc + biases[g]*m.v[k].sums[g]
			}
		}
	}
}
