package cpu

import (
	"github.com/mlxg/mlxg/internal/quant"
	"github.com/mlxg/mlxg/runner/compute"
)

// maxLinears is the most products Linears runs together (a layer's q, k and v).
const maxLinears = 4

// Linears implements compute.LinearsContext. Decode products of affine-quantized weights
// of one input share one prepared input vector and one parallel pass over all their rows;
// each row is computed as quantMatVec computes it (a row's result depends on that row and
// the prepared input alone), so the values are Linear's. Anything else goes through
// Linear one product at a time.
func (c *context) Linears(x compute.Tensor, ws []compute.Weight, out []compute.Tensor) {
	var cw [maxLinears]*weight
	a, ok := c.args(x)
	if ok && c.fusable(a[0], ws, &cw) {
		c.linears(a[0], cw, len(ws), out)
		return
	}
	for i, w := range ws {
		out[i] = c.Linear(x, w)
	}
}

// fusable reports whether the products of x with ws would all take quantMatVec's vector
// path with the same prepared input, and sets cw to the CPU weights.
func (c *context) fusable(x *tensor, ws []compute.Weight, cw *[maxLinears]*weight) bool {
	T := x.rows
	if len(ws) < 2 || len(ws) > maxLinears || T < 1 || T >= 4 || (len(c.segs) >= 2 && sum(c.segs) == T) {
		return false
	}
	for i, w := range ws {
		v, ok := w.(*weight)
		if !ok || v.in != x.cols || v.q.Mode != quant.Affine {
			return false
		}
		if i > 0 && (v.q.Bits != cw[0].q.Bits || v.q.GroupSize != cw[0].q.GroupSize) {
			return false
		}
		cw[i] = v
	}
	return true
}

// linears computes the products of x with ws[:n], fusable ones, into out.
func (c *context) linears(x *tensor, ws [maxLinears]*weight, n int, out []compute.Tensor) {
	var dst [maxLinears][]float32
	for i := range n {
		t := c.newTensor(x.rows, ws[i].out)
		dst[i], out[i] = t.data, t
	}
	q := ws[0].q
	if c.b.int8 && quant.Int8Supported(q.Bits, q.GroupSize) {
		vp := getVec8s(x.rows)
		matVecs(c.b, (*vp)[:x.rows], dst, x.data, ws, n)
		vec8sPool.Put(vp)
	} else {
		vp := getVecs(x.rows)
		matVecs(c.b, (*vp)[:x.rows], dst, x.data, ws, n)
		vecsPool.Put(vp)
	}
	for i := range n {
		if w := ws[i]; w.bias != nil {
			for t := 0; t < x.rows; t++ {
				addTo(dst[i][t*w.out:(t+1)*w.out], w.bias)
			}
		}
	}
}

// inputVec is a prepared input vector: quant.Vec, or quant.Vec8 with UseInt8.
type inputVec[V any] interface {
	*V
	Prepare(x []float32, bits, group int) error
	DotRowsStored(out []float32, packed []uint32, scales, biases quant.Scales)
}

// matVecs computes out[i] = x·ws[i]ᵀ (T rows of x, no bias) for the first n weights of
// ws, of equal input size, bits and group, as quantMatVec does each: the input prepared
// once into vecs, then the rows of all the weights, in order, split over the threads as
// quantMatVec splits one weight's (finer pieces were tried: no faster). The arrays come by
// value so that the closure holds copies instead of moving them to the heap.
func matVecs[V any, P inputVec[V]](b *Backend, vecs []V, out [maxLinears][]float32, x []float32, ws [maxLinears]*weight, n int) {
	in, q := ws[0].in, ws[0].q
	for t := range vecs {
		P(&vecs[t]).Prepare(x[t*in:(t+1)*in], q.Bits, q.GroupSize) // bits and group were validated at load
	}
	rows := 0
	for i := range n {
		rows += ws[i].out
	}
	gpr, wpr := in/q.GroupSize, quant.Words(in, q.Bits)
	b.parallel(rows, 32, func(lo, hi int) {
		first := 0 // of ws[i] in the concatenation
		for i := range n {
			w := ws[i]
			r0, r1 := max(lo-first, 0), min(hi-first, w.out)
			first += w.out
			// 64 rows at a time: with 2 or 3 tokens each chunk is reused from cache.
			for c0 := r0; c0 < r1; c0 += 64 {
				c1 := min(c0+64, r1)
				for t := range vecs {
					P(&vecs[t]).DotRowsStored(out[i][t*w.out+c0:t*w.out+c1], w.packed[c0*wpr:c1*wpr], w.scales.Slice(c0*gpr, c1*gpr), w.biases.Slice(c0*gpr, c1*gpr))
				}
			}
		}
	})
}
